#!/usr/bin/env bash
# Session 14, call 3: Nsight Compute on gemm_tma's 192-row forms, alone and in clusters of
# two (4 and 5 stages), at the 10x600 pass's first layer (Wqkv, 6,144-row bucket): where
# the time goes now that the cluster halves the activation tiles' L2 reads.
set -u
export STAGE=/tmp/sys1cuda OUT=${OUT:-/tmp/out}
rm -rf $STAGE/bin $STAGE/res
bench/gpu/cuda.sh setup checkpoint
R=$STAGE/res; mkdir -p $R
nvidia-smi -L > $R/machine.txt
command -v ncu || { echo "no ncu"; exit 1; }
S="--section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section SchedulerStats"
OWN=1 ITERS=1 timeout -k 5 240 ncu --clock-control none -k regex:gemm_tma_m192 -c 6 $S \
  $STAGE/bin/cuda-profile $STAGE/large 10x600 > $R/ncu-tma192.txt 2>&1
echo "ncu rc=$?"
grep -E "^  [a-z_0-9]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|Issue Slots Busy|Executed Ipc Active|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Grid Size|Cluster|Stall|stall|L1TEX|One or More" $R/ncu-tma192.txt | head -150
tar -C $STAGE -czf $OUT/res.tar.gz res
