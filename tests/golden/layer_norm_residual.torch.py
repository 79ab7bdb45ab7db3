# EqiForge plan of layer_norm_residual: 10 nodes, predicted 24.3 us (roofline prior (H100; published-time fit: held-out level 3 1.04x, 78% within 1.5x))
# rule sets: attention, broadcast, composite, concat, conv, distributive, matmul, reduction, reorder, reshape, scalar, softmax, structure, synthesized, transpose
def plan(x, r, weight, bias):
    t2 = torch.add(x, r)
    t4 = weight.reshape(1, 16)
    t6 = bias.reshape(1, 16)
    t7 = native_row_reduce(t2, 'layer_norm', ('x',), ('bin', 'add', ('bin', 'mul', ('acc',), ('in', 0)), ('in', 1)), 1e-05, [t4, t6])
    del t2, t4, t6
    t9 = t7 * 2.0
    del t7
    return (t9, )
