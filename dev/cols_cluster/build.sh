#!/usr/bin/env bash
# Builds the cubins (sm_90) used by bench.py; runs here, no GPU needed.
set -e
cd "$(dirname "$0")"
python3 bench.py gen
nvcc -arch=sm_90 -std=c++17 -cubin -diag-suppress 186 -Xptxas -v -o all.cubin all.cu 2> ptxas.txt
for e in 1 2 4 16; do
  nvcc -arch=sm_90 -std=c++17 -cubin -DEE=$e -DWB=32 -DKK=1 -DTT=512 -o base_e$e.cubin base.cu
done
grep -c "Compiling entry" ptxas.txt; grep -i spill ptxas.txt | grep -v " 0 bytes spill" | head; ls -la *.cubin
