#!/usr/bin/env bash
# Session 36 (2026-12-07), on an NVIDIA H100 80GB HBM3 (asked for nvidia-h200; the H100 came).
# Built here at a4cda4b plus the change then committed as a84c2fb (dependent-launches.patch,
# which the next commit took back out), so the version line names a4cda4b:
#   bench/gpu/carry-cuda.sh --build
# results/gpu was moved out of the working tree while it was carried.
# call1: the GPU tests (with the patch's two engines in the pass-by-pass comparison and 150
# batch compositions on large with both settings on), then one binary under four settings:
# smoke's answers compared with the first's, and two alternating rounds in process.
export SETTINGS='SYS1_CUDA_PDL=0|SYS1_CUDA_PDL=1|SYS1_CUDA_PDL=1 SYS1_CUDA_GEMM_OWN_TOKENS=0 SYS1_CUDA_GEMM_OWN_PREFER=1|SYS1_CUDA_PDL=0 SYS1_CUDA_GEMM_OWN_TOKENS=0 SYS1_CUDA_GEMM_OWN_PREFER=1'
AB_ROUNDS=2 RUNS=20 WARMUP=3 AB_SHAPES=s64_q1,s128_q1,s512_q1,s256_q10,s512_q10 \
  bench/gpu/cuda.sh setup checkpoint tests settings
# call2, the same warm machine, the defaults: served sizes and wrk at 16 and 64 clients.
SERVED_ALONE=0 WRK_SECONDS=8 bench/gpu/cuda.sh served
# call3, the same warm machine: cuda-profile's GPU time of every step (an event between steps).
NCU=0 STEP_SHAPES="1x150 1x600 10x600" bench/gpu/cuda.sh steps
# Serve and bench logs are cut to their first and last 30 lines (*.head-tail.log).
# call4, a second H100 machine, at 5b5529d (the worker's fixes: a failed load hands its
# queued requests to another worker, a preparation holds its admission slot), after
# `bench/gpu/carry-cuda.sh --build` again. Its files could not be copied back (this
# machine's disk was full at the time); call4/output.txt is what the call printed, its
# machine lines shortened.
SERVED_ALONE=0 WRK_SECONDS=8 bench/gpu/cuda.sh setup checkpoint served
