// A convolution's dimension numbers, `dim_labels=b01f_01io->b01f` with `feature_group_count=` and
// `batch_group_count=` (XLA's ConvolutionDimensionNumbers; semantics in
// https://openxla.org/xla/operation_semantics#convgeneraldilated), read from the instruction's
// raw attributes. The evaluator (eval/evaluator_convolution.cc) and the SPMD partitioner's
// convolution handler (spmd/partition_convolution.cc) read them through here.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "hlo/ir.h"

namespace weave {

// The dims of one operand: lhs and result: a = batch, b = feature; kernel: a = input feature,
// b = output feature. spatial[j] is the operand's dim labelled j.
struct ConvLabels {
  int64_t a = -1, b = -1;
  std::vector<int64_t> spatial;
};

struct ConvDims {
  ConvLabels lhs, kernel, out;
  int64_t feature_group_count = 1, batch_group_count = 1;
};

// `conv`'s dims for operands of rank `rank`. InvalidArgument naming the label text when
// dim_labels is missing or malformed (a part of another length, a missing or repeated letter,
// a skipped spatial number, operands with different spatial counts) or a group count is not a
// positive integer. The sizes are not checked against the shapes here.
absl::StatusOr<ConvDims> ParseConvDims(const HloInstruction& conv, int64_t rank);

}  // namespace weave
