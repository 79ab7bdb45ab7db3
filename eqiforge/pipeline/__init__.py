"""The stages after capture, written once: options, saturate -> price -> extract, repeated blocks, lowering
and the plan check, and the report of what happened."""
