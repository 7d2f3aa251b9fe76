// NumPy .npy reader/writer.
#include "eval/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "eval/numerics.h"

namespace weave::eval {
namespace {

using absl::InvalidArgumentError;

// The numpy dtype descr written for an element type.
std::string DescrFor(PrimitiveType t) {
  switch (t) {
    case PrimitiveType::PRED: return "|b1";
    case PrimitiveType::S8: return "|i1";
    case PrimitiveType::S16: return "<i2";
    case PrimitiveType::S32: return "<i4";
    case PrimitiveType::S64: return "<i8";
    case PrimitiveType::U8: return "|u1";
    case PrimitiveType::U16: return "<u2";
    case PrimitiveType::U32: return "<u4";
    case PrimitiveType::U64: return "<u8";
    case PrimitiveType::F64: return "<f8";
    default:
      if (StorageFor(t) == Storage::kFloat) return "<f4";
      return "";
  }
}

int DescrBytes(const std::string& d) { return d.empty() ? 0 : std::atoi(d.c_str() + 2); }

}  // namespace

absl::Status WriteNpy(const std::string& path, const Value& v) {
  const std::string descr = DescrFor(v.shape.element_type);
  if (descr.empty() || v.shape.IsTuple()) {
    return InvalidArgumentError(absl::StrCat("cannot write ", v.shape.ToString(false), " as .npy"));
  }
  std::string shape_txt = "(";
  for (int64_t d : v.shape.dims) absl::StrAppend(&shape_txt, d, ",");
  if (v.shape.dims.size() > 1) shape_txt.pop_back();
  shape_txt += ")";
  std::string header = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ",
                                    shape_txt, ", }");
  // Pad so that magic(6)+version(2)+len(2)+header is a multiple of 64, ending in '\n'.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) return absl::NotFoundError(absl::StrCat("cannot write ", path));
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t hl = static_cast<uint16_t>(header.size());
  const char hlb[2] = {static_cast<char>(hl & 0xff), static_cast<char>(hl >> 8)};
  out.write(hlb, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  const int64_t n = v.shape.ElementCount();
  const int bytes = DescrBytes(descr);
  std::string buf(static_cast<size_t>(n * bytes), '\0');
  for (int64_t k = 0; k < n; ++k) {
    char* p = buf.data() + k * bytes;
    switch (v.storage()) {
      case Storage::kFloat: std::memcpy(p, &v.f[static_cast<size_t>(k)], 4); break;
      case Storage::kDouble: std::memcpy(p, &v.d[static_cast<size_t>(k)], 8); break;
      case Storage::kInt: {
        const int64_t x = v.i[static_cast<size_t>(k)];
        std::memcpy(p, &x, static_cast<size_t>(bytes));  // little endian: low bytes first
        break;
      }
      default: break;
    }
  }
  out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  if (!out) return absl::InternalError(absl::StrCat("write to ", path, " failed"));
  return absl::OkStatus();
}

absl::StatusOr<Value> ReadNpy(const std::string& path, PrimitiveType want) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0) {
    return InvalidArgumentError(absl::StrCat(path, ": not a .npy file"));
  }
  const int major = static_cast<unsigned char>(data[6]);
  size_t hlen, hstart;
  if (major == 1) {
    hlen = static_cast<unsigned char>(data[8]) | (static_cast<size_t>(static_cast<unsigned char>(data[9])) << 8);
    hstart = 10;
  } else {
    if (data.size() < 12) return InvalidArgumentError(absl::StrCat(path, ": truncated header"));
    hlen = 0;
    for (int k = 0; k < 4; ++k) hlen |= static_cast<size_t>(static_cast<unsigned char>(data[8 + k])) << (8 * k);
    hstart = 12;
  }
  if (hstart + hlen > data.size()) return InvalidArgumentError(absl::StrCat(path, ": truncated header"));
  const std::string header = data.substr(hstart, hlen);
  auto field = [&](const std::string& key) -> std::string {
    size_t p = header.find("'" + key + "'");
    if (p == std::string::npos) return "";
    p = header.find(':', p);
    if (p == std::string::npos) return "";
    ++p;
    while (p < header.size() && header[p] == ' ') ++p;
    if (p >= header.size()) return "";
    if (header[p] == '\'') {
      const size_t e = header.find('\'', p + 1);
      return e == std::string::npos ? "" : header.substr(p + 1, e - p - 1);
    }
    if (header[p] == '(') {
      const size_t e = header.find(')', p);
      return e == std::string::npos ? "" : header.substr(p + 1, e - p - 1);
    }
    const size_t e = header.find_first_of(",}", p);
    return header.substr(p, e - p);
  };
  std::string descr = field("descr");
  if (field("fortran_order") == "True") {
    return InvalidArgumentError(absl::StrCat(path, ": fortran_order arrays are not supported"));
  }
  if (descr.size() == 3 && descr[0] == '=') descr[0] = '<';
  std::vector<int64_t> dims;
  const std::string shape_text = field("shape");  // must outlive the pointer walk below
  for (const char* p = shape_text.c_str(); *p;) {
    while (*p == ' ' || *p == ',') ++p;
    if (!*p) break;
    char* end;
    const long long v = std::strtoll(p, &end, 10);
    if (end == p || v < 0) return InvalidArgumentError(absl::StrCat(path, ": bad shape in header"));
    dims.push_back(v);
    p = end;
  }
  // Accepted dtypes for the wanted type.
  const std::string expected = DescrFor(want);
  bool ok = descr == expected;
  if (!ok && StorageFor(want) == Storage::kFloat && descr == "<f2" && want != PrimitiveType::BF16) ok = true;
  if (!ok && want == PrimitiveType::PRED && descr == "|u1") ok = true;
  if (!ok) {
    return InvalidArgumentError(absl::StrCat(path, ": dtype '", descr, "' does not match the parameter type ",
                                             std::string(PrimitiveTypeName(want)), " (expected '",
                                             expected, "')"));
  }
  Value v;
  v.shape = Shape(want, dims);
  v = Value::Zeros(v.shape);
  const int64_t n = v.shape.ElementCount();
  const int bytes = DescrBytes(descr);
  const size_t body = hstart + hlen;
  if (data.size() - body != static_cast<size_t>(n * bytes)) {
    return InvalidArgumentError(absl::StrCat(path, ": data size ", data.size() - body,
                                             " bytes does not match shape (", absl::StrJoin(dims, ","),
                                             ") of ", descr));
  }
  const char* p = data.data() + body;
  for (int64_t k = 0; k < n; ++k, p += bytes) {
    if (descr == "<f4") {
      float x;
      std::memcpy(&x, p, 4);
      if (v.storage() == Storage::kFloat) v.f[static_cast<size_t>(k)] = RoundFloatToType(x, want);
    } else if (descr == "<f2") {
      uint16_t h;
      std::memcpy(&h, p, 2);
      v.f[static_cast<size_t>(k)] = static_cast<float>(RoundToType(DecodeFloat(h, PrimitiveType::F16), want));
    } else if (descr == "<f8") {
      std::memcpy(&v.d[static_cast<size_t>(k)], p, 8);
    } else {
      uint64_t u = 0;
      std::memcpy(&u, p, static_cast<size_t>(bytes));
      v.i[static_cast<size_t>(k)] = WrapToType(static_cast<int64_t>(u), want);
    }
  }
  return v;
}

}  // namespace weave::eval
