// Minimal NumPy .npy (format version 1.0/2.0) reader and writer for evaluator inputs/outputs.
//
// Written dtypes: floats of 32 bits or fewer (f16, bf16, f32, FP8) as '<f4' (exact), f64 as '<f8',
// integers as their numpy dtype ('|i1', '<i2', '<i4', '<i8', '|u1', '<u2', '<u4', '<u8'), pred as
// '|b1'. C order only (fortran_order False).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "eval/value.h"

namespace weave::eval {

// Writes an array value to `path`. Errors: unsupported type, I/O failure.
absl::Status WriteNpy(const std::string& path, const Value& v);

// Reads `path` as a value of element type `want` (the parameter's type). Accepted dtypes:
// '<f4' (or '<f2') for f16/bf16/f32/FP8 (values are rounded to the type), '<f8' for f64, the exact
// numpy dtype for integers, '|b1' (or '|u1' with 0/1) for pred. Errors name the file and the
// expected and found dtype. The shape is taken from the file.
absl::StatusOr<Value> ReadNpy(const std::string& path, PrimitiveType want);

}  // namespace weave::eval
