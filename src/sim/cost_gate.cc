// The cost gate's oracle on the simulator (see cost_gate.h).
#include "sim/cost_gate.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "analysis/replication.h"
#include "gpu/compile_pipeline.h"
#include "hlo/instruction_text.h"
#include "hlo/parser.h"
#include "hlo/status_macros.h"

namespace weave::sim {
namespace {

// Producers pulled into a region instead of becoming parameters: index arithmetic, constants,
// layout changes and the element-wise steps of a dequantization.
bool IsCheapProducer(const HloInstruction* i) {
  switch (i->opcode()) {
    case HloOpcode::kConstant:
    case HloOpcode::kIota:
    case HloOpcode::kPartitionId:
    case HloOpcode::kReplicaId:
    case HloOpcode::kBroadcast:
    case HloOpcode::kConvert:
    case HloOpcode::kReshape:
    case HloOpcode::kBitcast:
    case HloOpcode::kCopy:
    case HloOpcode::kTranspose:
    case HloOpcode::kSlice:
    case HloOpcode::kDynamicSlice:
    case HloOpcode::kMultiply:
    case HloOpcode::kDivide:
    case HloOpcode::kAdd:
    case HloOpcode::kSubtract:
    case HloOpcode::kClamp:
    case HloOpcode::kCompare:
    case HloOpcode::kSelect:
      return true;
    default:
      return false;
  }
}

constexpr int kProducerDepth = 4;
// How far back from a seed a path to another seed is looked for (instructions): deep enough that
// the regions are those of an unbounded walk on the shared dumps and layer stacks (why 64:
// bench/NOTES.md).
constexpr int kPathDepth = 64;

// Marks on instructions by unique id, one byte each in a table kept between queries (ids are
// process-wide and only grow, so the table is as large as the instructions ever created);
// unmarked again when it goes out of scope, through the ids it set: a use costs what it marks.
// A second IdMarks alive on the same thread gets a table of its own.
class IdMarks {
 public:
  IdMarks() : owner_(!Busy()), t_(owner_ ? &Shared() : &own_) {
    if (owner_) Busy() = true;
  }
  IdMarks(const IdMarks&) = delete;
  IdMarks& operator=(const IdMarks&) = delete;
  ~IdMarks() {
    for (size_t id : set_) (*t_)[id] = 0;
    if (owner_) Busy() = false;
  }
  // Marks `i`; false when it was marked already.
  bool Insert(const HloInstruction* i) {
    const int64_t id = i->unique_id();
    if (id < 0) return false;  // not made by Create or a clone: in no computation
    std::vector<uint8_t>& t = *t_;
    if (static_cast<size_t>(id) >= t.size()) {
      t.resize(std::max<size_t>(static_cast<size_t>(id) + 1, 2 * t.size()), 0);
    }
    if (t[id]) return false;
    t[id] = 1;
    set_.push_back(static_cast<size_t>(id));
    return true;
  }
  bool Contains(const HloInstruction* i) const {
    const int64_t id = i->unique_id();
    return id >= 0 && static_cast<size_t>(id) < t_->size() && (*t_)[id] != 0;
  }

 private:
  static std::vector<uint8_t>& Shared() {
    thread_local std::vector<uint8_t> table;
    return table;
  }
  static bool& Busy() {
    thread_local bool busy = false;
    return busy;
  }
  bool owner_;
  std::vector<uint8_t> own_;
  std::vector<uint8_t>* t_;
  std::vector<size_t> set_;
};

// `roots` and every computation they call, transitively, callees before callers.
std::vector<const HloComputation*> CalleesFirst(const std::vector<const HloComputation*>& roots) {
  std::vector<const HloComputation*> order;
  absl::flat_hash_set<const HloComputation*> seen;
  std::vector<std::pair<const HloComputation*, std::vector<const HloComputation*>>> stack;
  auto callees = [](const HloComputation* c) {
    std::vector<const HloComputation*> out;
    for (const HloInstruction* i : c->instructions()) {
      for (const HloComputation* cc : i->called_computations()) {
        if (cc != nullptr) out.push_back(cc);
      }
    }
    std::reverse(out.begin(), out.end());  // popped from the back: the first callee first
    return out;
  };
  for (const HloComputation* root : roots) {
    if (!seen.insert(root).second) continue;
    stack.push_back({root, callees(root)});
    while (!stack.empty()) {
      auto& [c, pending] = stack.back();
      if (!pending.empty()) {
        const HloComputation* next = pending.back();
        pending.pop_back();
        if (seen.insert(next).second) stack.push_back({next, callees(next)});
        continue;
      }
      order.push_back(c);
      stack.pop_back();
    }
  }
  return order;
}

}  // namespace

namespace {

using RegionSet = absl::flat_hash_set<const HloInstruction*>;

// Adds to `region` the instructions on paths between seeds.
void AddPathsBetweenSeeds(const std::vector<const HloInstruction*>& seeds,
                          const std::function<int64_t(const HloInstruction*)>& topological_index,
                          RegionSet& region) {
  // Instructions on paths between seeds: backward from a seed (at most kPathDepth steps), then
  // forward from the seeds through those alone, since every instruction on a path from one seed
  // to another reaches the second seed. Both walks stay near the candidate (within kPathDepth
  // of its seeds), so a query costs what the candidate touches, not the computation.
  // The backward walk visits some hundred times the region (everything within kPathDepth
  // upstream): its marks are bytes by unique id, not a hash set.
  // With a topological index of every seed, an instruction below the lowest seed's index is
  // reached from no seed, and neither is anything above it that it reads: the walk marks it (it
  // may be a path's end only if a seed reaches it, which none does) and goes no further. A
  // node a seed reaches has its every path to a seed through nodes that seed reaches, none of
  // them cut, so its depth and the forward walk's result are as without the index.
  int64_t floor = -1;
  if (topological_index != nullptr) {
    for (const HloInstruction* s : seeds) {
      const int64_t p = topological_index(s);
      if (p < 0) {
        floor = -1;
        break;
      }
      floor = floor < 0 ? p : std::min(floor, p);
    }
  }
  auto below_every_seed = [&](const HloInstruction* o) {
    if (floor < 0) return false;
    const int64_t p = topological_index(o);
    return p >= 0 && p < floor;
  };
  IdMarks bwd;
  std::vector<const HloInstruction*> level(seeds.begin(), seeds.end()), next;
  for (int depth = 0; depth < kPathDepth && !level.empty(); ++depth) {
    next.clear();
    for (const HloInstruction* i : level) {
      for (const HloInstruction* o : i->operands()) {
        if (bwd.Insert(o) && !below_every_seed(o)) next.push_back(o);
      }
    }
    level.swap(next);
  }
  std::vector<const HloInstruction*> work(seeds.begin(), seeds.end());
  absl::flat_hash_set<const HloInstruction*> fwd;
  while (!work.empty()) {
    const HloInstruction* i = work.back();
    work.pop_back();
    for (const HloInstruction* u : i->users()) {
      if (bwd.Contains(u) && fwd.insert(u).second) {
        region.insert(u);
        work.push_back(u);
      }
    }
  }
}

// Adds the cheap producers of the region's operands (at most kProducerDepth deep).
void AddCheapProducers(RegionSet& region) {
  std::deque<std::pair<const HloInstruction*, int>> work;
  for (const HloInstruction* i : region) work.emplace_back(i, 0);
  while (!work.empty()) {
    auto [i, depth] = work.front();
    work.pop_front();
    if (depth >= kProducerDepth) continue;
    for (const HloInstruction* o : i->operands()) {
      if (region.contains(o) || !IsCheapProducer(o)) continue;
      region.insert(o);
      work.emplace_back(o, depth + 1);
    }
  }
}

// The elements of a region's tuple (a loop's state) the rest of the computation reads: their
// get-tuple-elements join the region and become its outputs, so that the passes run on the
// region keep what the module keeps (a loop's own result), and may still drop what nobody reads
// (a dead state element).
void AddReadTupleElements(RegionSet& region) {
  std::vector<const HloInstruction*> gtes;
  for (const HloInstruction* i : region) {
    if (!i->shape().IsTuple()) continue;  // only a tuple has get-tuple-element users
    for (const HloInstruction* u : i->users()) {
      if (!region.contains(u) && u->opcode() == HloOpcode::kGetTupleElement) gtes.push_back(u);
    }
  }
  region.insert(gtes.begin(), gtes.end());
}

// The region's instructions in an order with operands first: by creation (unique id; for a
// parsed module, its text order), each pulled behind the region operands it reads.
std::vector<const HloInstruction*> OperandsFirstOrder(const RegionSet& region) {
  std::vector<const HloInstruction*> by_id(region.begin(), region.end());
  std::sort(by_id.begin(), by_id.end(), [](const HloInstruction* a, const HloInstruction* b) {
    return a->unique_id() < b->unique_id();
  });
  std::vector<const HloInstruction*> order;
  order.reserve(by_id.size());
  absl::flat_hash_set<const HloInstruction*> placed;
  std::vector<std::pair<const HloInstruction*, size_t>> stack;
  for (const HloInstruction* start : by_id) {
    if (!placed.insert(start).second) continue;
    stack.push_back({start, 0});
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->operands().size()) {
        const HloInstruction* o = node->operands()[next++];
        if (region.contains(o) && placed.insert(o).second) stack.push_back({o, 0});
        continue;
      }
      order.push_back(node);
      stack.pop_back();
    }
  }
  return order;
}

// The computations the region's instructions call, in the order the instructions call them.
std::vector<const HloComputation*> CalledInOrder(const std::vector<const HloInstruction*>& order) {
  std::vector<const HloComputation*> called_in_order;
  absl::flat_hash_set<const HloComputation*> seen;
  for (const HloInstruction* i : order) {
    for (const HloComputation* c : i->called_computations()) {
      if (c != nullptr && seen.insert(c).second) called_in_order.push_back(c);
    }
  }
  return called_in_order;
}

// Channel ids by their rank among those the region's text prints (key mode).
std::vector<int64_t> PrintedChannels(const std::vector<const HloComputation*>& callees,
                                     const std::vector<const HloInstruction*>& order) {
  std::vector<int64_t> channels;
  for (const HloComputation* c : callees) {
    for (const HloInstruction* i : c->instructions()) {
      if (i->channel_id) channels.push_back(*i->channel_id);
    }
  }
  for (const HloInstruction* i : order) {
    if (i->channel_id) channels.push_back(*i->channel_id);
  }
  return channels;
}

// Per region instruction: how many region instructions read it (each reader once).
absl::flat_hash_map<const HloInstruction*, int64_t> ReadersInside(
    const std::vector<const HloInstruction*>& order, const RegionSet& region) {
  absl::flat_hash_map<const HloInstruction*, int64_t> readers_inside;
  for (const HloInstruction* r : order) {
    for (size_t k = 0; k < r->operands().size(); ++k) {
      const HloInstruction* o = r->operands()[k];
      if (!region.contains(o)) continue;
      if (std::find(r->operands().begin(), r->operands().begin() + k, o) !=
          r->operands().begin() + k) {
        continue;  // an operand read twice by one reader counts once
      }
      ++readers_inside[o];
    }
  }
  return readers_inside;
}

// The region the candidate `seeds` (one computation's instructions) stands for: the seeds, the
// instructions on paths between them, the cheap producers of their operands and the
// get-tuple-elements of their tuples that the rest of the computation reads.
absl::StatusOr<RegionSet> CollectRegion(
    const std::vector<const HloInstruction*>& seeds,
    const std::function<int64_t(const HloInstruction*)>& topological_index) {
  if (seeds.empty() || seeds[0] == nullptr) {
    return absl::InvalidArgumentError("no instructions in the candidate");
  }
  const HloComputation* comp = seeds[0]->parent();
  if (comp == nullptr || comp->parent() == nullptr) {
    return absl::InvalidArgumentError("the candidate is not in a module");
  }
  RegionSet region;
  for (const HloInstruction* s : seeds) {
    if (s == nullptr || s->parent() != comp) {
      return absl::InvalidArgumentError("the candidate's instructions are not in one computation");
    }
    region.insert(s);
  }
  AddPathsBetweenSeeds(seeds, topological_index, region);
  AddCheapProducers(region);
  AddReadTupleElements(region);
  return region;
}

// The region's text (CostRegionText) or, with `key` set, its key (CostRegionKey, but for the
// queue ids): the same text printed in the printer's canonical-names mode
// (hlo/instruction_text.h), with the entry and its root under names no other name can take.
absl::StatusOr<std::string> RegionText(
    const std::vector<const HloInstruction*>& seeds, bool key,
    const std::function<int64_t(const HloInstruction*)>& topological_index) {
  ASSIGN_OR_RETURN(RegionSet region, CollectRegion(seeds, topological_index));
  const HloComputation* comp = seeds[0]->parent();
  // The text: called computations (callees first), then the entry.
  const HloModule* module = comp->parent();
  const std::vector<const HloInstruction*> order = OperandsFirstOrder(region);
  const std::vector<const HloComputation*> called_in_order = CalledInOrder(order);
  std::string text = absl::StrCat("HloModule cost_region, num_partitions=",
                                  std::max<int64_t>(module->num_partitions, 1),
                                  ", replica_count=", std::max<int64_t>(module->replica_count, 1),
                                  "\n\n");
  const std::vector<const HloComputation*> callees = CalleesFirst(called_in_order);
  CanonicalNames canonical;
  std::optional<ScopedCanonicalNames> canonical_mode;
  if (key) {
    canonical.SetChannels(PrintedChannels(callees, order));
    canonical_mode.emplace(&canonical);
  }
  for (const HloComputation* c : callees) {
    absl::StrAppend(&text, c->ToString(), "\n\n");
  }
  // In key mode, the printer writes every other name as %n<k>: %entry and %root are taken by
  // nothing else.
  std::string entry_name = key ? "entry" : "cost_region";
  // Fresh names for the entry and its root: not those of a called computation or of any
  // instruction the text holds (the region's, their operands', the callees').
  // Both fresh names start with "cost_region": only the names that do can be taken, and the
  // others (every instruction of every callee) are passed over with one comparison each, not
  // hashed.
  static constexpr std::string_view kFreshPrefix = "cost_region";
  absl::flat_hash_set<std::string_view> taken;
  auto note = [&taken](std::string_view name) {
    if (name.substr(0, kFreshPrefix.size()) == kFreshPrefix) taken.insert(name);
  };
  if (!key) {
    for (const HloComputation* c : callees) {
      note(c->name());
      for (const HloInstruction* i : c->instructions()) note(i->name());
    }
    for (const HloInstruction* i : order) {
      note(i->name());
      for (const HloInstruction* o : i->operands()) note(o->name());
    }
  }
  while (taken.contains(entry_name)) entry_name += "_";
  // A name of the region as the text writes it: %name, or its rank in key mode.
  auto append_name = [&](std::string* out, std::string_view name) {
    if (key) {
      canonical.AppendName(out, name);
    } else {
      out->push_back('%');
      out->append(name);
    }
  };
  absl::StrAppend(&text, "ENTRY %", entry_name, " {\n");
  absl::flat_hash_set<const HloInstruction*> params;
  int64_t next_param = 0;
  // Which parameters are proven the same on every partition: asked only for single-element
  // values (the scalar FP8 scales, which is what the region's passes prove replicated: the
  // handler's FP8 shift, the all-to-all pass). A larger parameter without the annotation counts
  // as replicated all the same (XLA's SPMD semantics, analysis/replication.h), so asking about it
  // would change no estimate; not asking keeps a query from walking the whole module upstream
  // (an activation's residual chain through every earlier layer and loop).
  ReplicationAnalysis replication(*module);  // one walk for all the region's scalar parameters
  auto proven_same = [&replication](const HloInstruction* o) {
    const std::optional<int64_t> elements = o->shape().CheckedElementCount();
    return o->shape().IsArray() && elements && *elements <= 1 && replication.IsSame(o);
  };
  std::vector<const HloInstruction*> outputs;
  absl::flat_hash_map<const HloInstruction*, int64_t> readers_inside = ReadersInside(order, region);
  for (const HloInstruction* i : order) {
    for (const HloInstruction* o : i->operands()) {
      if (region.contains(o) || !params.insert(o).second) continue;
      // A value proven equal on every partition stays so (an FP8 scale must be, for the
      // quantizer and the FP8 GEMM rewriter to fire on the region as on the module).
      text.append("  ");
      append_name(&text, o->name());
      absl::StrAppend(&text, " = ", o->shape().ToString(), " parameter(", next_param++, ")",
                      proven_same(o) ? ", sharding={replicated}" : "", "\n");
    }
    text.append("  ");
    AppendDetachedInstructionText(&text, *i);  // no ROOT marker, no control predecessors
    text.push_back('\n');
    // An output: a value the rest of the computation reads (or its root), or that nobody in the
    // region reads. Counted from the region's side: a value shared across the module
    // (partition-id, a constant) has users everywhere, and scanning them would cost the module.
    const int64_t inside = readers_inside[i];
    const bool read_inside = inside > 0;
    const bool read_outside = i == comp->root() || i->user_count() > inside;
    if (!read_inside || read_outside) outputs.push_back(i);
  }
  std::vector<std::string> names, shapes;
  for (const HloInstruction* o : outputs) {
    std::string name;
    append_name(&name, o->name());
    names.push_back(std::move(name));
    shapes.push_back(o->shape().ToString());
  }
  std::string root = key ? "root" : "cost_region_root";
  while (taken.contains(root)) root += "_";
  absl::StrAppend(&text, "  ROOT %", root, " = (", absl::StrJoin(shapes, ", "), ") tuple(",
                  absl::StrJoin(names, ", "), ")\n}\n");
  return text;
}

}  // namespace

absl::StatusOr<std::string> CostRegionText(
    const std::vector<const HloInstruction*>& seeds,
    const std::function<int64_t(const HloInstruction*)>& topological_index) {
  return RegionText(seeds, /*key=*/false, topological_index);
}

absl::StatusOr<std::unique_ptr<HloModule>> ParseCostRegion(const std::string& text) {
  absl::StatusOr<std::unique_ptr<HloModule>> parsed = ParseHloModule(text, "<cost region>");
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the candidate's region does not stand alone: ", parsed.status().message()));
  }
  return parsed;
}

absl::StatusOr<std::unique_ptr<HloModule>> ExtractCostRegion(
    const std::vector<const HloInstruction*>& seeds) {
  ASSIGN_OR_RETURN(std::string text, CostRegionText(seeds));
  return ParseCostRegion(text);
}

namespace {

// The stream (queue) ids a backend config names: the value of "operation_queue_id" and the
// entries of "wait_on_operation_queues", each as "N" or N. Spans are the digits alone.
struct QueueIdSpan {
  size_t begin, end;
  int64_t value;
};

std::vector<QueueIdSpan> QueueIdSpans(const std::string& text) {
  std::vector<QueueIdSpan> spans;
  // One value at `p` ("N" or N, after optional spaces); returns where it ends, or npos.
  auto value_at = [&](size_t p) -> size_t {
    while (p < text.size() && text[p] == ' ') ++p;
    const bool quoted = p < text.size() && text[p] == '"';
    const size_t begin = quoted ? p + 1 : p;
    size_t end = begin;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    int64_t v = 0;
    // Only a whole, valid non-negative number is a queue id (anything else stays verbatim).
    const bool closed = !quoted || (end < text.size() && text[end] == '"');
    if (end > begin && closed &&
        absl::SimpleAtoi(absl::string_view(text.data() + begin, end - begin), &v)) {
      spans.push_back({begin, end, v});
    }
    return quoted && closed ? end + 1 : end;
  };
  static constexpr std::string_view kId = "\"operation_queue_id\":";
  for (size_t p = text.find(kId); p != std::string::npos; p = text.find(kId, p + 1)) {
    value_at(p + kId.size());
  }
  static constexpr std::string_view kWaits = "\"wait_on_operation_queues\":[";
  for (size_t p = text.find(kWaits); p != std::string::npos; p = text.find(kWaits, p + 1)) {
    size_t q = p + kWaits.size();
    while (q < text.size() && text[q] != ']') {
      const size_t next = value_at(q);
      q = next > q ? next : q + 1;
      while (q < text.size() && (text[q] == ',' || text[q] == ' ')) ++q;
    }
  }
  std::sort(spans.begin(), spans.end(),
            [](const QueueIdSpan& x, const QueueIdSpan& y) { return x.begin < y.begin; });
  return spans;
}

// Replaces every queue id of `text` (QueueIdSpans) by its rank among the distinct non-zero ids,
// one map for the ids given and the ids waited on (0, the default stream, stays 0): the order
// and equality of streams are kept, and which queue a wait names, not the numbers.
std::string RankQueueIds(const std::string& text) {
  const std::vector<QueueIdSpan> spans = QueueIdSpans(text);
  if (spans.empty()) return text;
  std::vector<int64_t> values;
  for (const QueueIdSpan& q : spans) {
    if (q.value != 0) values.push_back(q.value);
  }
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  std::string out;
  out.reserve(text.size());
  size_t from = 0;
  for (const QueueIdSpan& q : spans) {
    out.append(text, from, q.begin - from);
    const int64_t rank =
        q.value == 0
            ? 0
            : 1 + (std::lower_bound(values.begin(), values.end(), q.value) - values.begin());
    absl::StrAppend(&out, rank);
    from = q.end;
  }
  out.append(text, from, std::string::npos);
  return out;
}

}  // namespace

absl::StatusOr<std::string> CostRegionKey(
    const std::vector<const HloInstruction*>& seeds,
    const std::function<int64_t(const HloInstruction*)>& topological_index) {
  ASSIGN_OR_RETURN(std::string printed, RegionText(seeds, /*key=*/true, topological_index));
  return RankQueueIds(printed);
}

std::string CanonicalRegionText(const HloModule& module) {
  std::unique_ptr<HloModule> copy = module.Clone();
  int64_t n = 0, c = 0;
  std::vector<int64_t> channels;
  for (HloComputation* comp : copy->MakeComputationPostOrder()) {
    comp->set_name(absl::StrCat("c", c++));
    for (HloInstruction* i : comp->MakeInstructionPostOrder()) {
      i->set_name(absl::StrCat("i", n++));
      // Source locations name the layer a region came from, and no estimate reads them.
      i->metadata.clear();
      if (i->channel_id) channels.push_back(*i->channel_id);
    }
  }
  // Channel ids and stream (queue) ids by rank: the same candidate in every layer of a model is
  // one estimate, though each layer's collectives and loops have ids of their own.
  std::sort(channels.begin(), channels.end());
  channels.erase(std::unique(channels.begin(), channels.end()), channels.end());
  for (HloComputation* comp : copy->computations()) {
    for (HloInstruction* i : comp->instructions()) {
      if (i->channel_id) {
        i->channel_id = 1 + (std::lower_bound(channels.begin(), channels.end(), *i->channel_id) -
                             channels.begin());
      }
    }
  }
  copy->set_name("region");
  return RankQueueIds(copy->ToString());
}

absl::StatusOr<double> SimCostOracle::EstimateVariant(const HloModule& region,
                                                      const std::string& pass,
                                                      const CostVariant& variant) {
  ASSIGN_OR_RETURN(auto r, EstimateVariantBound(region, pass, variant, false));
  return r.first;
}

absl::StatusOr<std::pair<double, double>> SimCostOracle::EstimateVariantBound(
    const HloModule& region, const std::string& pass, const CostVariant& variant,
    bool one_stream_bound) {
  std::unique_ptr<HloModule> m = region.Clone();
  if (variant.rewrite) {
    // The asking pass alone, with the variant's options.
    PassOptions options = c_.pass_options;
    for (const auto& [k, v] : variant.options) options.Set(k, v);
    ASSIGN_OR_RETURN(std::unique_ptr<HloPass> p, PassRegistry::Get().Create(pass, options));
    if (absl::StatusOr<bool> changed = p->Run(m.get()); !changed.ok()) {
      return absl::InternalError(absl::StrCat(pass, ": ", changed.status().message()));
    }
  }
  // The rest of the compile pipeline after the asking pass (all of it when the pass is not in
  // it), with the compile's options.
  auto at = std::find(c_.pipeline.begin(), c_.pipeline.end(), pass);
  std::vector<std::string> rest(at == c_.pipeline.end() ? c_.pipeline.begin() : at + 1,
                                c_.pipeline.end());
  rest.erase(std::remove(rest.begin(), rest.end(), pass), rest.end());
  ASSIGN_OR_RETURN(std::unique_ptr<HloPassPipeline> later,
                   MakeCompilePipeline(rest, c_.pass_options));
  if (absl::StatusOr<bool> changed = later->Run(m.get()); !changed.ok()) {
    return absl::InternalError(changed.status().message());  // "pass <name>: ..."
  }
  if (!c_.dump_dir.empty() && !dump_name_.empty()) {
    std::ofstream out(std::filesystem::path(c_.dump_dir) / (dump_name_ + ".hlo"));
    out << m->ToString();
  }
  ASSIGN_OR_RETURN(SimResult r, SimulateModule(*m, c_.system, c_.sim_options));
  if (!one_stream_bound) return std::make_pair(r.total_us, r.total_us);
  SimOptions serial = c_.sim_options;
  serial.serial_sub_wave_gemms = true;
  ASSIGN_OR_RETURN(SimResult s, SimulateModule(*m, c_.system, serial));
  return std::make_pair(std::max(r.total_us, s.total_us), r.total_us);
}

absl::StatusOr<std::vector<double>> SimCostOracle::Estimate(const CostQuery& query) {
  // The region's key (CostRegionKey); its text is printed only when it is parsed.
  ASSIGN_OR_RETURN(std::string region_key, CostRegionKey(query.seeds, query.topological_index));
  std::string pass_key = absl::StrCat(query.pass, "\n", region_key);
  // The region is printed and parsed, and its canonical text made, only for a region not seen
  // before (by its key) or a variant not yet estimated: a repeated layer costs its key alone.
  std::unique_ptr<HloModule> region;
  auto parse = [&]() -> absl::Status {
    if (region != nullptr) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::string text, CostRegionText(query.seeds, query.topological_index));
    ASSIGN_OR_RETURN(std::unique_ptr<HloModule> parsed, ParseCostRegion(text));
    region = std::move(parsed);
    return absl::OkStatus();
  };
  int64_t region_id = 0;
  if (auto known = canonical_id_of_key_.find(pass_key); known != canonical_id_of_key_.end()) {
    region_id = known->second;
  } else {
    RETURN_IF_ERROR(parse());
    const int64_t fresh = static_cast<int64_t>(canonical_ids_.size());
    region_id = canonical_ids_
                    .try_emplace(absl::StrCat(query.pass, "\n", CanonicalRegionText(*region)),
                                 fresh)
                    .first->second;
    canonical_id_of_key_.emplace(std::move(pass_key), region_id);
  }
  const std::string key_base = absl::StrCat("region ", region_id);
  std::vector<double> out, concurrent;
  for (const CostVariant& v : query.variants) {
    std::string key = absl::StrCat(v.rewrite ? "rewrite" : "leave",
                                   query.one_stream_bound ? " one-stream-bound" : "", "\n");
    if (v.rewrite) {
      for (const auto& [k, val] : v.options) absl::StrAppend(&key, k, "=", val, "\n");
    }
    absl::StrAppend(&key, key_base);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.push_back(it->second.first);
      concurrent.push_back(it->second.second);
      continue;
    }
    if (!c_.dump_dir.empty()) {
      std::string label = v.label;
      for (char& ch : label) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      dump_name_ = absl::StrCat(dumped_++, ".", query.location, ".", label);
    }
    RETURN_IF_ERROR(parse());
    ASSIGN_OR_RETURN(auto us, EstimateVariantBound(*region, query.pass, v, query.one_stream_bound));
    cache_[key] = us;
    out.push_back(us.first);
    concurrent.push_back(us.second);
  }
  if (query.one_stream_bound) concurrent_us_ = std::move(concurrent);
  return out;
}

}  // namespace weave::sim
