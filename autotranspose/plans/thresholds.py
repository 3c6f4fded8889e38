"""The thresholds a permute plan decides by (plans/permute.py): when a pass becomes one
gather launch, when an alternative is planned to race it, which rows are realigned, and the
tile limits. Each says what it was set from; pure data."""

from __future__ import annotations

# When a transpose or row-copy pass becomes one gather launch (`gather_reason`). First guesses,
# to be calibrated with `autotranspose bench --random-permute` on the GPU:
# - a launch costs a few microseconds of host and GPU issue time however little it moves, and
#   a tile kernel ramps up and drains around each one. Past 8 launches that overhead piles up
#   (random 3-6-D permutes on an H200 made up to 16000), while one gather launch pays it once;
GATHER_MAX_LAUNCHES = 8
# - under 4 MiB a launch moves its bytes (read and written) in about 2 us at an H200's
#   4.8 TB/s, no longer than its overhead: its host loops cost more than the gather's lower
#   bandwidth (gathered reads, index arithmetic per element) does;
GATHER_MIN_LAUNCH_BYTES = 4 << 20
# - a transpose whose two sides are both under 8 elements has tiles of a few elements: no tile
#   kernel fills a warp's accesses there (a 2x3 transpose moves 6 elements per matrix), while
#   the gather's stores are coalesced whatever the shape; likewise a batch of matrices with
#   one side under 8 (H200, int64 696 x 312x3 in 8 launches: 23% of copy, CuPy's and
#   PyTorch's gathers 73% and 83%); a single skinny matrix keeps its tuned kernels (90%+);
GATHER_MIN_SIDE = 8
# A row copy walks two more dims of its rows inside the launch (blockIdx.z, at most 65535 in
# all): the (8, 4096, 32, 128) bfloat16 head swap was 8 launches of 32 MiB and reached 79.6% of
# copy on an H200, each launch paying its ramp-up and drain; in one launch they overlap.
ROWS_MAX_OUTER = 65535
# A row copy's blocks take consecutive rows along m, so of its two largest dims m is the one
# whose rows lie side by side in the output (out stride = the row), where either does: a
# block's stores are then one contiguous run. Measured on an H200 (dev/rowgrid_check.py, the same
# two dims walked the other way round): float64 36x3359x7x29 by (2,1,0,3) 74.4 -> 85.3, int64
# 8x8x4x8x10320x4 by (2,4,3,0,1,5) 77.9 -> 84.1, int64 rows of 17280 bytes 90.2 -> 94.2;
# where m's rows were already side by side in the output, turning the walk to make the input
# side contiguous gained nothing (head swap 96.2 -> 95.8, complex128 2944-byte rows 92.1 ->
# 92.3).
# A transpose pass's launch walks two more batch dims in the same way (a tuned kernel's outer
# variant, templates/common/outer.cu.j2: the batch index split into three dims per tile):
# host loops of many small launches had made such permutes gathers, e.g. float32
# (200, 64, 112, 8) by (3, 1, 0, 2), 64 launches of 0.7 MB, 32.7% of copy as a gather on an
# H200. The launch's tiles must fit one grid (2**31 - 1) for any config: a matrix has at most
# `max_tiles` of them, tiles of the smallest side (config.TILE_SIZES[0], which the plan, below
# the configs, does not import) and one row more for a staged kernel's windows.
GRID_TILES = 2**31 - 1
MIN_TILE_SIDE = 16
# ... but only for matrices whose two sides are both at least this many bytes: a tile then
# holds one narrow matrix, its rows a few sectors each, and the launch gains nothing over
# host loops or the gather. H200, bench --random-permute 40 --seed 7, gather -> outer launch:
# float32 200 x 112x8 x 64 (32-byte rows) 32.7 -> 13.9% of copy, int32 101 x 14x12 x 93 x 3
# (48) 16.3 -> 3.8, int32 30 x 14x318 x 12 x 8 (56) 29.8 -> 27.1; while uint16 55 x 137x32
# (64) 14.2 -> 21.8, complex128 2398 x 13x16 (208) 60.4 -> 73.5, 296 x 16x56 (256)
# 36.2 -> 81.4 and complex64 14 x 114x7850 38.1 -> 86.2.
OUTER_MIN_ROW_BYTES = 64
# Other passes that move the same problem, which the first call of a call signature times
# against the plan's own pass, keeping the fastest (`Plan.alternatives`, `permuter`). No rule
# of sizes ranked these right on an H200 (dev/packed_check.py, random permute seeds 7 and 11,
# % of copy): the winner depends on how much of the array sits in L2 and on the box's
# shape. So the plan names the candidates and a measurement picks:
# - where the plan runs one packed launch: the gather (faster in 7 of 22 such cases, e.g.
#   float64 2x16x1197x44x3 84.6 vs 68.2, float32 2x15x4302x69x1 61.3 vs 38.1: its reads 2-3
#   elements apart hit L2), and a box of PACKED_BIG_ELEMS elements (2-D problems: int32
#   546x24x835 49.8 -> 82.2, 2x64x2x8x27832 55.3 -> 92.8; multi-dim ones lose: 200x64x112x8
#   67.1 -> 51.4);
# - where it runs one launch instead of a batched pass of at most ALT_MAX_LAUNCHES host-loop
#   launches: that batched pass (GATHER_MAX_LAUNCHES and GATHER_MIN_LAUNCH_BYTES are first
#   guesses that no run has calibrated);
# - a row copy of rows under ALT_ROW_BYTES: a packed launch (int32 4x225440x72 78.7 -> 92.4,
#   float64 96x8x5120x1x8 85.0 -> 92.6; but int16 25x3x8x1276x42 54.1 -> 40.4), and for rows
#   under ALT_GATHER_ROW_BYTES the gather too (H200, random permute seed 20261818: uint8
#   12x25121x184, rows of 184 bytes, copy 70.0, packed 74.5, gather 92.1; complex128 rows of
#   48 bytes 54.0 / 83.2 / 78.9; but rows of 128 bytes 93.0 / 94.8 / 84.8);
# - a transpose with a side under ALT_SIDE_BYTES: a packed launch (complex128
#   13x11x218x28x16 73.9 -> 92.5, complex64 8x3x181x15x865 36.9 -> 66.8; most others lose);
# - where a one-launch pass replaced a batch of matrices with a side under GATHER_MIN_SIDE
#   whose other side is at least ALT_NARROW_LONG_BYTES: that batched transpose, in its own
#   launch. Its few-rows and few-columns kernels (kinds/regt.py) move a single such matrix
#   near the copy ceiling, and a batch of a few long matrices is the same work (uint8 images
#   (8, 1080, 1920, c) HWC <-> CHW: the vector box ran c = 2 and 3 at 64-84% of copy on an
#   H200, where one 2073600 x c image runs at 90+); short long sides keep the rule above
#   (int64 696 x 312x3: 23% of copy in that batched pass).
# A plan whose pass is a contiguous copy, a wide row copy or a transpose of two wide sides
# has none: the tuned kernels run those near the copy ceiling, and a first call there costs
# nothing extra. Nor has an array under ALT_MIN_BYTES: it moves in a few microseconds, about
# a launch's overhead, so no choice saves much, while a first call that builds an
# alternative compiles its kernel (about 1 s of nvcc for a new box shape).
PACKED_BIG_ELEMS = 4096
# ... and for 1- and 2-byte elements a box of PACKED_WORDS_BYTES too: the words kernel
# (autotranspose/packed.py) moves 16 bytes a thread per block step, so a 4096-element box of
# bytes keeps one block step a thread in flight where 16 KB keeps four.
PACKED_WORDS_BYTES = 16 << 10
ALT_MIN_BYTES = 8 << 20
ALT_MAX_LAUNCHES = 64
ALT_ROW_BYTES = 1024
ALT_GATHER_ROW_BYTES = 256
ALT_SIDE_BYTES = 512
ALT_NARROW_LONG_BYTES = 64 << 10
# A row copy whose rows, strides or pointers leave no word of 16 bytes moves in narrower
# words (`_copy`): 1-2 bytes a thread for odd rows, which is 8-16x the instructions and
# requests a byte of 16-byte accesses (H200, a random permute mix: bool rows of 29034
# bytes in 2-byte words 56.0% of copy, uint8 rows of 21 bytes 15.6%, behind PyTorch). Such a
# copy can run realigned (`realigned`, templates/rows/ `at_copy_runs`): the output cut
# into runs of contiguous bytes (a row, or the rows that lie side by side in the output), each
# written in aligned 16-byte words whose bytes are funnel-shifted out of aligned 16-byte
# loads. H200, word copy against realigned in one process (dev/realign_check.py, %
# of copy): uint8 rows of 21 bytes 9.5 -> 78.4, of 333 bytes 21.0 -> 77.3, bool 29034 56.2 ->
# 87.0, int16 222 29.9 -> 81.8, uint16 108 57.0 -> 81.5, float32 4004 81.3 -> 93.4, float16
# rows of 24 bytes in 8-byte words 20.7 -> 83.3; but rows under REALIGN_MIN_ROW_BYTES lost or
# stayed low (uint8 3 bytes 17.8 -> 6.5, uint16 6 bytes 29.6 -> 9.0, uint8 5 bytes 13.3 ->
# 18.6: a word then takes 3-16 rows, one loop turn each), and rows of 8-byte words from
# REALIGN_WORDS_FIRST_BYTES up kept the word copy's pace or lost (float64 6216 bytes 87.1 ->
# 87.9, complex64 104 bytes 91.0 -> 73.1). So the realigned copy is the plan's pass for rows
# of REALIGN_MIN_ROW_BYTES or more in words under 8 bytes, or in 8-byte words under
# REALIGN_WORDS_FIRST_BYTES; for longer rows of 8-byte words it is a first call's
# alternative; either way the other one is too. Runs under REALIGN_MIN_RUN_BYTES (output rows
# apart and short: mostly the head and tail words a run's ends cut, stored bytewise) keep the
# word copy. A run's bytes are counted in 32 bits (REALIGN_MAX_RUN_BYTES).
REALIGN_MIN_ROW_BYTES = 16
REALIGN_WORDS_FIRST_BYTES = 64
REALIGN_MIN_RUN_BYTES = 128
REALIGN_MAX_RUN_BYTES = 2**32 - 1
# The vector box is the plan's pass for elements up to this size (where the packed kernels
# move bytes and halves one at a time) and an alternative for wider ones.
VECTOR_OWN_MAX_ELEM_BYTES = 2
