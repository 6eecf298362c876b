"""Analyses of the PTX AST that passes and emitters ask questions of, and that change nothing: register def/use
sets and liveness (``liveness``), symbolic evaluation of straight-line code over hash-consed terms (``symbolic``),
and the address forms of a fused loop's memory accesses (``fused_access``). The rewriting passes are jit/passes/."""
