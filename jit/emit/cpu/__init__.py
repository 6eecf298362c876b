"""CPU target: kernels become native functions that run whole thread blocks.

The package: ``codegen`` (``build_kernel``, the entry point to_llvm calls), ``env`` (a kernel's entry environment:
its contexts, registers and thread records), ``kernel`` (the kernel function: plain loops over the threads, or the
scheduler), ``sched``/``resolve``/``warp`` (the scheduler, barriers and warp collectives), ``records`` (the
per-thread records), ``func`` (.func code), ``loops``/``fused``/``lockstep``/``lockstep_run`` (grid-stride loops),
``guard``/``ranges`` (bounds checks hoisted out of loops), ``red`` (combined global reductions), ``grid`` (grid
sync). The slot layouts they share with the loader are jit/emit/abi.py.

# NOTE [CPU work-group execution]
# A kernel is compiled to ``void wooly_run_<tag>_<i>(i64* launch_ctx, i64* worker_ctx)`` (tag: a hash of the PTX,
# NOTE [one shared engine] in jit/loader.py). Each OS worker thread calls it; it claims block ids from an atomic
# counter in the launch context and runs each block completely.
#
# Kernels without sync points (no barrier, no warp collective) run a block as three nested loops over tid.z/y/x
# with the kernel body inside; registers are allocas that mem2reg turns into SSA values, so LLVM can optimise
# (and sometimes vectorise) across threads.
#
# Kernels with sync points use a scheduler. The sync_points pass numbers every barrier/warp collective k = 1..K and
# records the registers live across it. Per thread we keep a record in worker scratch memory: pc (where to resume),
# park (0 runnable, k parked at sync k, -1 exited), an exchange slot for warp-collective inputs, a result slot, and
# one save slot per register live across any sync point. A round runs every runnable thread from its pc until it
# parks or exits. Then, if any thread is parked at a warp collective, the collective is computed for each such thread
# from the exchange slots of the lanes of its warp parked at the same sync point, and those threads resume. Otherwise
# all threads parked at barriers are released together (threads that exited count as arrived). The block ends when
# every thread has exited. Barriers inside loops and branches work because a sync point is just a resume label.
"""
