"""Plans across input sizes: one plan lifted to symbolic dims and checked at other sizes, shape buckets where
another plan is predicted better, and the torch.compile graphs whose dims Dynamo made dynamic. (The symbolic
dims themselves are ``eqiforge/dims.py``; the per-signature plan cache both entry points use is
``runtime/plan_cache.py``.)"""
