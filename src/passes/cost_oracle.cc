#include "passes/cost_oracle.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace weave {

CostQuery CostQuery::WithOrWithout(std::string pass, std::string location, std::string what,
                                   std::vector<const HloInstruction*> seeds,
                                   std::string with_label,
                                   std::map<std::string, std::string> options) {
  CostQuery q;
  q.pass = std::move(pass);
  q.location = std::move(location);
  q.what = std::move(what);
  q.seeds = std::move(seeds);
  q.variants.push_back({"without", false, {}});
  q.variants.push_back({std::move(with_label), true, std::move(options)});
  return q;
}

double DecisionMargin::For(double baseline_us) const {
  return std::max(relative * baseline_us, absolute_us);
}

std::string CostEstimate::Note() const {
  if (!ok()) {
    return absl::StrCat("no estimate (", error, "); ",
                        chosen == 0 ? "left" : "applied", " as without the cost gate");
  }
  auto one = [&](size_t i) {
    std::string t = absl::StrFormat("%.1f us %s", us[i], i < labels.size() ? labels[i] : "");
    if (i < concurrent_us.size() && concurrent_us[i] < us[i] - 0.05) {
      absl::StrAppend(&t, absl::StrFormat(" (%.1f us if its GEMMs run concurrently)",
                                          concurrent_us[i]));
    }
    return t;
  };
  std::string out = "predicted ";
  for (size_t i = 1; i < us.size(); ++i) {
    if (i > 1) out += ", ";
    out += one(i);
  }
  if (!us.empty()) absl::StrAppend(&out, us.size() > 1 ? " vs " : "", one(0));
  absl::StrAppend(&out, " on ", system);
  if (margin_us > 0) {
    absl::StrAppend(&out, "; a gain under the gate's margin of ",
                    absl::StrFormat("%.1f", margin_us), " us");
  }
  return out;
}

CostEstimate CostOracle::Decide(const CostQuery& query) {
  CostEstimate e;
  e.system = SystemName();
  for (const CostVariant& v : query.variants) e.labels.push_back(v.label);
  const int n = static_cast<int>(query.variants.size());
  int fallback = query.fallback < 0 || query.fallback >= n ? n - 1 : query.fallback;
  if (fallback < 0) fallback = 0;
  if (n < 2) {
    e.error = "fewer than two variants to compare";
  } else if (query.seeds.empty()) {
    e.error = "no instructions in the candidate";
  } else {
    concurrent_us_.clear();
    absl::StatusOr<std::vector<double>> us = Estimate(query);
    if (us.ok() && concurrent_us_.size() == us->size()) e.concurrent_us = concurrent_us_;
    if (!us.ok()) {
      e.error = std::string(us.status().message());
    } else if (static_cast<int>(us->size()) != n) {
      e.error = absl::StrCat("the model gave ", us->size(), " estimates for ", n, " variants");
    } else {
      e.us = *std::move(us);
      // The fastest rewrite, then whether it saves the margin over the baseline.
      int best = 1;
      for (int i = 2; i < n; ++i) {
        if (e.us[static_cast<size_t>(i)] < e.us[static_cast<size_t>(best)]) best = i;
      }
      const double base = e.us[0];
      const double need = margin_.For(base);
      if (base - e.us[static_cast<size_t>(best)] >= need) {
        e.chosen = best;
      } else if (e.us[static_cast<size_t>(best)] < base) {
        e.margin_us = need;
      }
    }
  }
  if (!e.ok()) {
    e.us.clear();
    e.concurrent_us.clear();
    e.chosen = fallback;
  }
  decisions_.push_back({query.pass, query.location, query.what, e});
  return e;
}

}  // namespace weave
