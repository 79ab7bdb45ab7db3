"""Deciding what runs: the rules that keep the program where a plan is no better, the timing loop, and the
measured choice between candidates (the program, the plan, the next-best plans, their Inductor compiles)."""
