// Shardy round-trip attribute parsing (see sdy_text.h).
#include "spmd/sdy_text.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "hlo/text_cursor.h"
#include "hlo/status_macros.h"

namespace weave::spmd {
namespace {

using hlo_internal::TextCursor;

absl::Status Bad(std::string_view what, std::string_view text) {
  return absl::InvalidArgumentError(absl::StrCat(
      absl::string_view(what.data(), what.size()), " in '",
      absl::string_view(text.data(), std::min<size_t>(text.size(), 200)), "'"));
}

// `["a"=2, "b"=2](, device_ids=[...])?` after `#sdy.mesh<` or `mesh<`, through the closing `>`.
absl::StatusOr<Mesh> ParseMeshBody(TextCursor& c) {
  Mesh m;
  if (!c.Consume('[')) return Bad("expected '[' in mesh", c.text());
  if (!c.Consume(']')) {
    do {
      std::string name;
      int64_t size;
      if (!c.QuotedString(&name) || !c.Consume('=') || !c.Int(&size) || size < 1) {
        return Bad("expected \"name\"=size in mesh", c.text());
      }
      if (m.AxisIndex(name) >= 0) return Bad("mesh axis repeated", c.text());
      m.axis_names.push_back(name);
      m.axis_sizes.push_back(size);
    } while (c.Consume(','));
    if (!c.Consume(']')) return Bad("expected ']' after mesh axes", c.text());
  }
  if (c.Consume(',')) {
    if (!c.ConsumeWord("device_ids") || !c.Consume('=')) {
      return Bad("expected device_ids= in mesh", c.text());
    }
    std::vector<int64_t> ids;
    if (!c.IntList('[', ']', &ids)) return Bad("malformed device_ids", c.text());
    if (m.axis_sizes.empty()) {
      if (ids.size() != 1 || ids[0] < 0) return Bad("a maximal mesh names one device", c.text());
      m.maximal_device = ids[0];
    } else {
      if (static_cast<int64_t>(ids.size()) != m.num_devices()) {
        return Bad("device_ids do not match the mesh size", c.text());
      }
      for (int64_t d : ids) {
        if (d < 0) return Bad("negative device id", c.text());
      }
      m.device_ids = std::move(ids);
    }
  }
  if (!c.Consume('>')) return Bad("expected '>' after mesh", c.text());
  return m;
}

absl::StatusOr<AxisRef> ParseSdyAxis(TextCursor& c, const Mesh& m) {
  std::string name;
  if (!c.QuotedString(&name)) return Bad("expected an axis name", c.text());
  AxisRef r;
  r.axis = m.AxisIndex(name);
  if (r.axis < 0) return Bad(absl::StrCat("axis \"", name, "\" is not in the mesh"), c.text());
  if (c.Consume(':')) {
    if (!c.Consume('(') || !c.Int(&r.pre_size) || !c.Consume(')') || !c.Int(&r.size)) {
      return Bad("expected a sub-axis :(pre)size", c.text());
    }
  }
  return r;
}

absl::Status ParseSdyAxisList(TextCursor& c, const Mesh& m, std::vector<AxisRef>* out,
                              DimAxes* dim) {
  if (!c.Consume('{')) return Bad("expected '{'", c.text());
  if (!c.Consume('}')) {
    do {
      if (dim != nullptr && c.Consume('?')) {
        dim->closed = false;
        break;
      }
      ASSIGN_OR_RETURN(AxisRef r, ParseSdyAxis(c, m));
      out->push_back(r);
    } while (c.Consume(','));
    if (!c.Consume('}')) return Bad("expected '}'", c.text());
  }
  // Priority suffix p<k>.
  if (dim != nullptr && c.Peek() == 'p') {
    const size_t save = c.pos();
    c.Consume('p');
    int64_t k;
    if (c.Int(&k) && k >= 0) {
      dim->priority = k;
    } else {
      c.set_pos(save);
    }
  }
  return absl::OkStatus();
}

// `@name` or `mesh<...>` / `#sdy.mesh<...>`.
absl::StatusOr<Mesh> ParseMeshRef(TextCursor& c, const SdyMeshes& meshes) {
  if (c.Consume('@')) {
    std::string_view name = c.Word();
    auto it = meshes.find(name);
    if (it == meshes.end()) {
      return Bad(absl::StrCat("mesh @", std::string(name), " is not defined in xla.sdy.meshes"),
                 c.text());
    }
    return it->second;
  }
  c.ConsumeStr("#sdy.");
  if (!c.ConsumeStr("mesh<")) return Bad("expected @mesh or mesh<...>", c.text());
  return ParseMeshBody(c);
}

// `<@mesh, [dims], replicated={..}, unreduced={..}>` with `<` already consumed; through `>`.
absl::StatusOr<MeshSharding> ParseShardingBody(TextCursor& c, const SdyMeshes& meshes) {
  MeshSharding s;
  absl::StatusOr<Mesh> mesh = ParseMeshRef(c, meshes);
  if (!mesh.ok()) return mesh.status();
  s.mesh = *std::move(mesh);
  if (!c.Consume(',') || !c.Consume('[')) return Bad("expected ', [' after the mesh", c.text());
  if (!c.Consume(']')) {
    do {
      DimAxes d;
      RETURN_IF_ERROR(ParseSdyAxisList(c, s.mesh, &d.axes, &d));
      s.dims.push_back(std::move(d));
    } while (c.Consume(','));
    if (!c.Consume(']')) return Bad("expected ']' after dimension shardings", c.text());
  }
  while (c.Consume(',')) {
    if (c.ConsumeWord("replicated")) {
      if (!c.Consume('=')) return Bad("expected replicated=", c.text());
      if (absl::Status st = ParseSdyAxisList(c, s.mesh, &s.replicated, nullptr); !st.ok()) {
        return st;
      }
    } else if (c.ConsumeWord("unreduced")) {
      if (!c.Consume('=')) return Bad("expected unreduced=", c.text());
      if (absl::Status st = ParseSdyAxisList(c, s.mesh, &s.unreduced, nullptr); !st.ok()) {
        return st;
      }
    } else {
      return Bad("unexpected attribute in sharding", c.text());
    }
  }
  if (!c.Consume('>')) return Bad("expected '>' after sharding", c.text());
  if (s.mesh.maximal_device) s.kind = MeshSharding::Kind::kMaximal;
  return s;
}

}  // namespace

std::string UnescapeSdy(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\n')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\n')) text.remove_suffix(1);
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') {
    text = text.substr(1, text.size() - 2);
  }
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size() && (text[i + 1] == '"' || text[i + 1] == '\\')) {
      out.push_back(text[++i]);
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

absl::StatusOr<Mesh> ParseSdyMesh(std::string_view text) {
  const std::string t = UnescapeSdy(text);
  TextCursor c(t);
  c.ConsumeStr("#sdy.");
  if (!c.ConsumeStr("mesh<")) return Bad("expected #sdy.mesh<", t);
  absl::StatusOr<Mesh> m = ParseMeshBody(c);
  if (m.ok() && !c.AtEnd()) return Bad("unexpected text after mesh", t);
  return m;
}

absl::StatusOr<SdyMeshes> ParseSdyMeshes(std::string_view text) {
  const std::string t = UnescapeSdy(text);
  TextCursor c(t);
  SdyMeshes out;
  if (!c.Consume('{')) return Bad("expected '{' in xla.sdy.meshes", t);
  if (c.Consume('}')) return out;
  do {
    std::string name(c.Word());
    if (name.empty()) {
      if (!c.QuotedString(&name)) return Bad("expected a mesh name", t);
    }
    if (!c.Consume('=')) return Bad("expected '=' after mesh name", t);
    c.ConsumeStr("#sdy.");
    if (!c.ConsumeStr("mesh<")) return Bad("expected #sdy.mesh<", t);
    ASSIGN_OR_RETURN(Mesh m, ParseMeshBody(c));
    out[name] = std::move(m);
  } while (c.Consume(','));
  if (!c.Consume('}') || !c.AtEnd()) return Bad("expected '}' after meshes", t);
  return out;
}

absl::StatusOr<MeshSharding> ParseSdySharding(std::string_view text, const SdyMeshes& meshes) {
  const std::string t = UnescapeSdy(text);
  TextCursor c(t);
  if (!c.ConsumeStr("#sdy.sharding<")) return Bad("expected #sdy.sharding<", t);
  absl::StatusOr<MeshSharding> s = ParseShardingBody(c, meshes);
  if (s.ok() && !c.AtEnd()) return Bad("unexpected text after sharding", t);
  return s;
}

absl::StatusOr<std::vector<MeshSharding>> ParseSdyShardingPerValue(std::string_view text,
                                                                   const SdyMeshes& meshes) {
  const std::string t = UnescapeSdy(text);
  TextCursor c(t);
  if (!c.ConsumeStr("#sdy.sharding_per_value<") || !c.Consume('[')) {
    return Bad("expected #sdy.sharding_per_value<[", t);
  }
  std::vector<MeshSharding> out;
  if (!c.Consume(']')) {
    do {
      if (!c.Consume('<')) return Bad("expected '<' before a sharding", t);
      ASSIGN_OR_RETURN(MeshSharding s, ParseShardingBody(c, meshes));
      out.push_back(std::move(s));
    } while (c.Consume(','));
    if (!c.Consume(']')) return Bad("expected ']'", t);
  }
  if (!c.Consume('>') || !c.AtEnd()) return Bad("expected '>' at the end", t);
  return out;
}

absl::StatusOr<std::vector<std::string>> ParseSdyManualAxes(std::string_view text) {
  const std::string t = UnescapeSdy(text);
  TextCursor c(t);
  if (!c.ConsumeStr("#sdy<") || !c.ConsumeWord("manual_axes") || !c.Consume('{')) {
    return Bad("expected #sdy<manual_axes{", t);
  }
  std::vector<std::string> out;
  if (!c.Consume('}')) {
    do {
      std::string name;
      if (!c.QuotedString(&name)) return Bad("expected an axis name", t);
      out.push_back(std::move(name));
    } while (c.Consume(','));
    if (!c.Consume('}')) return Bad("expected '}'", t);
  }
  if (!c.Consume('>')) return Bad("expected '>'", t);
  return out;
}

std::map<std::string, std::string> SplitFrontendAttributes(std::string_view blob) {
  std::map<std::string, std::string> out;
  TextCursor c(blob);
  if (!c.Consume('{')) return out;
  while (!c.AtEnd() && c.Peek() != '}') {
    std::string key;
    if (c.Peek() == '"') {
      if (!c.QuotedString(&key)) break;
    } else {
      key = std::string(c.Word());
    }
    if (key.empty() || !c.Consume('=')) break;
    const size_t b = c.pos();
    if (c.Peek() == '{') {
      if (!c.SkipBraces()) break;
    } else if (c.Peek() == '"') {
      std::string ignored;
      if (!c.QuotedString(&ignored)) break;
    } else {
      c.Word();
    }
    std::string_view v = blob.substr(b, c.pos() - b);
    while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
    out[key] = std::string(v);
    if (!c.Consume(',')) break;
  }
  return out;
}

}  // namespace weave::spmd
