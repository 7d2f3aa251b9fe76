// Uneven windowed dims for the windowed einsum decomposer (windowed_einsum_decomposer.h). When
// the dim a collective matmul gathers or scatters is not a multiple of the ring, the SPMD
// partitioner pads it to whole tiles and puts a view between the dot and the collective (XLA's
// partitioner does the same and windows the padded dim: spmd_partitioner_test.cc's
// EinsumRHSWindowed* tests, dims of 39295 on 2 and 4 devices):
//
//   AG:  dot(slice(all-gather(x)), w)   the slice drops the gathered dim's padding
//     -> slice(dot(all-gather(x), w))   when that dim is a non-contracting dim of the dot
//     -> dot(all-gather(select(valid, x, 0)), pad(w, 0))   when it is a contracting dim: each
//                                       shard's elements past the end are zeroed (by its position
//                                       in the all-gather's group) and w is zero-padded to match
//   RS:  reduce-scatter(pad(dot(a, b), 0))        the pad fills the scattered dim to whole blocks
//     -> reduce-scatter(dot(pad(a, 0), b))        when each padded dim is an operand's
//                                                 non-contracting dim (all-reduce alike)
//
// after which the decomposer finds the dot next to its collective and windows the padded dim.
// All exact: the padded rows of the AG form are computed and dropped (they never mix with the
// others), its padded contracting positions multiply zeros by zeros, and the RS form's padded
// rows are zero either way. Not rewritten (the decomposer then says why it leaves the
// collective): a slice that trims a batch dim or anything but the tail of one dim, a contracting
// trim of an asynchronous all-gather or one whose groups cannot be read; a pad with low or interior padding, a non-zero value, a
// padded batch dim, or a dot with other users.
#pragma once

#include <string>
#include <vector>

#include "hlo/ir.h"

namespace weave::spmd {

// Rewrites `comp` (of a module with `num_partitions` partitions and `replica_count` replicas, for
// the all-gathers' groups) as above; appends one line per rewrite to `done` ("'dot.3': ..."), for
// the pass's remarks. Returns the number of rewrites; an error only when the IR refuses a
// replacement or removal (an internal inconsistency), never for a form it leaves alone. Linear
// in the computation's instructions.
absl::StatusOr<int64_t> CanonicalizeUnevenWindows(HloComputation* comp, int64_t num_partitions,
                                                 int64_t replica_count, std::vector<std::string>* done);

}  // namespace weave::spmd
