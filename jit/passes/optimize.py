"""Parse the textual IR with LLVM, verify it and run the O3 pipeline for the host CPU."""

from __future__ import annotations

import llvmlite.binding as llvm

from jit.errors import invalid_ptx

_INIT = False


def init_llvm() -> None:
    global _INIT
    if not _INIT:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _INIT = True


def host_target_machine(opt: int = 3) -> llvm.TargetMachine:
    """The host CPU, static relocation, large code model: objects are loaded by MCJIT's RuntimeDyld into gpud's own
    process, where sections of a long-running shared engine can end up more than 2 GiB apart; a 32-bit PC-relative
    relocation (small code model) then fails an assertion inside RuntimeDyld, which aborts gpud. 64-bit absolute
    relocations always resolve (tests/unit/jit/test_errors_cache.py::test_objects_need_no_32_bit_relocations)."""
    init_llvm()
    tgt = llvm.Target.from_default_triple()
    return tgt.create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        opt=opt,
        reloc="static",
        codemodel="large",
    )


def fast_masked_memory() -> bool:
    """Whether vector loads and stores under a mask are cheap on this host: with AVX-512 they are (mask registers);
    with AVX2 only, LLVM still vectorises conditional accesses with `vmaskmov`, whose store form is microcoded on
    AMD Zen 1-3 (a guarded saxpy ran 4x slower vectorised than scalar on a Zen 3 core). Where this is False, NOTE
    [masked vectors] (jit/emit/cpu/loops.py) keeps the one kind of loop whose conditionals are all predictable (a fast copy
    with bounds checks left in it) scalar. The answer depends only on the host, which is part of every cache key
    (jit/compiler.py)."""
    global _FAST_MASKS
    if _FAST_MASKS is None:
        init_llvm()
        _FAST_MASKS = "+avx512f" in llvm.get_host_cpu_features().flatten().split(",")
    return _FAST_MASKS


_FAST_MASKS: bool | None = None


def _parse(ir_text: str, tm: llvm.TargetMachine) -> llvm.ModuleRef:
    try:
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
    except RuntimeError as e:  # an IR bug on our side, reported as a PTX problem of this module
        raise invalid_ptx(f"internal IR verification failed: {str(e)[:2000]}") from e
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    return mod


QUICK_PASSES = ("sroa", "simplify_cfg", "instruction_combine", "dead_code_elimination")


def run_quick(ir_text: str, tm: llvm.TargetMachine) -> llvm.ModuleRef:
    """The quick tier (NOTE [compile tiers], jit/compiler.py): registers out of memory (SROA), one round of
    simplification, nothing else. With a codegen-O0 target machine this is 5-25x cheaper than `run`."""
    mod = _parse(ir_text, tm)
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=0))
    fpm = llvm.create_new_function_pass_manager()
    for p in QUICK_PASSES:
        getattr(fpm, f"add_{p}_pass")()
    for f in mod.functions:
        if not f.is_declaration:
            fpm.run(f, pb)
    return mod


def run(ir_text: str, tm: llvm.TargetMachine, level: int = 3) -> llvm.ModuleRef:
    mod = _parse(ir_text, tm)
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod
