// The compile report's view of all-to-all windowed einsums (see report.h, FindAllToAllWindowLoops).
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "windowed_einsum/all_to_all_window.h"
#include "tools/report.h"
#include "tools/report_internal.h"

namespace weave::tools {

std::vector<WindowedLoopInfo> AllToAllWindowLoops(const std::vector<AllToAllWindow>& windows,
                                                  int64_t default_group) {
  std::vector<WindowedLoopInfo> out;
  {
    for (const AllToAllWindow& w : windows) {
      WindowedLoopInfo info;
      info.name = w.result->name();
      info.kind = "all-to-all";
      info.ring_size = w.group_size;
      info.trip_count = 1;
      info.unrolled = true;
      info.layout = w.exchange_first ? "all-to-all->dot" : "dot->all-to-all";
      info.chunks = static_cast<int64_t>(w.all_to_alls.size());
      std::set<std::string> wire;
      for (const HloInstruction* a : w.all_to_alls) {
        info.bytes_sent += CollectiveBytesSent(*a, default_group);
        if (a->operand_count() > 0 && a->operand(0)->shape().IsArray()) {
          wire.insert(std::string(PrimitiveTypeName(a->operand(0)->shape().element_type)));
        }
      }
      info.wire_type = absl::StrJoin(wire, "+");
      for (const HloInstruction* g : w.gemms) {
        ++info.dots;
        if (IsFp8GemmCustomCall(*g)) ++info.fp8_gemms;
      }
      out.push_back(std::move(info));
    }
  }
  return out;
}

std::vector<WindowedLoopInfo> FindAllToAllWindowLoops(const HloModule& module,
                                                      int64_t default_group) {
  return AllToAllWindowLoops(ScanLoops(module).all_to_all, default_group);
}

std::set<const HloInstruction*> AllToAllWindowExchanges(const HloModule& module) {
  std::set<const HloInstruction*> out;
  for (const HloComputation* c : module.computations()) {
    for (const AllToAllWindow& w : FindAllToAllWindows(*c)) {
      out.insert(w.all_to_alls.begin(), w.all_to_alls.end());
    }
  }
  return out;
}

}  // namespace weave::tools
