#!/usr/bin/env bash
# Session 13, call 6: Nsight Compute on gemm_tma and on cuBLASLt's kernels (nvjet_*) at the
# 10x600 pass (6,144-row bucket), 8255612's binaries: where gemm_tma's time goes against
# cuBLASLt's on the same shapes.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
nvidia-smi -L > $R/machine.txt
command -v ncu || { echo "no ncu"; exit 1; }
S="--section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section SchedulerStats"
OWN=1 ITERS=1 timeout -k 5 200 ncu --clock-control none -k regex:gemm_tma -c 40 $S \
  $STAGE/bin/cuda-profile $STAGE/large 10x600 > $R/ncu-tma.txt 2>&1
echo "ncu tma rc=$?"
OWN=1 ITERS=1 timeout -k 5 200 ncu --clock-control none -k regex:nvjet -c 30 $S \
  $STAGE/bin/cuda-profile $STAGE/large 10x600 > $R/ncu-nvjet.txt 2>&1
echo "ncu nvjet rc=$?"
for f in $R/ncu-tma.txt $R/ncu-nvjet.txt; do
  echo "== $f"
  grep -E "^  [a-z_0-9]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|Issue Slots Busy|Executed Ipc Active|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Shared Memory Configuration Size|Dynamic Shared" $f | head -120
done
tar -C $STAGE -czf $OUT/res.tar.gz res
