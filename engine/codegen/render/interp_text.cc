#include "engine/codegen/render/interp_text.h"

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/base/status.h"
#include "engine/uop/parser.h"
#include "engine/uop/printer.h"

namespace kiln::codegen {
namespace {

constexpr absl::string_view kMagic = "# kiln-interp v1 ";

absl::Status Bad(const char* what) {
  return absl::InvalidArgumentError(absl::StrCat("interp program header: ", what));
}

// "a,b,c" -> exactly n int64s.
absl::Status ParseInts(absl::string_view s, size_t n, int64_t* out) {
  std::vector<absl::string_view> parts = absl::StrSplit(s, ',');
  if (parts.size() != n) return Bad("wrong number of launch dims");
  for (size_t i = 0; i < n; ++i)
    if (!absl::SimpleAtoi(parts[i], &out[i]) || out[i] < 0) return Bad("bad launch dim");
  return absl::OkStatus();
}

}  // namespace

const RendererCaps& InterpTextRenderer::caps() const {
  static const RendererCaps caps = [] {
    RendererCaps c;
    c.has_threads = true;
    return c;
  }();
  return caps;
}

absl::StatusOr<std::string> InterpTextRenderer::Render(const Program& p) const {
  if (!IsValidKernelName(p.name)) return absl::InvalidArgumentError("interp renderer: bad kernel name");
  absl::flat_hash_map<const UOp*, size_t> pos;
  for (size_t i = 0; i < p.uops.size(); ++i) {
    if (!p.uops[i]) return absl::InvalidArgumentError("interp renderer: null uop");
    pos.emplace(p.uops[i].get(), i);
  }
  std::vector<std::string> bufs, vars;
  for (const BufferParam& b : p.buffers)
    bufs.push_back(absl::StrCat(b.slot, ":", b.dtype.Name(), ":", b.size, ":", b.is_output ? "out" : "in"));
  for (const UOpPtr& v : p.vars) {
    auto it = pos.find(v.get());
    if (it == pos.end()) return absl::InvalidArgumentError("interp renderer: var not in the uops list");
    vars.push_back(absl::StrCat(it->second));
  }
  std::string out = absl::StrCat(std::string(kMagic), "name=", p.name, " buffers=", absl::StrJoin(bufs, ","),
                                 " vars=", absl::StrJoin(vars, ","), " global=", p.global_size[0], ",",
                                 p.global_size[1], ",", p.global_size[2], " local=", p.local_size[0], ",",
                                 p.local_size[1], ",", p.local_size[2], " threads=", p.threads, "\n");
  absl::StrAppend(&out, PrintGraph(absl::MakeConstSpan(p.uops)));
  return out;
}

absl::StatusOr<Program> ParseInterpText(std::string_view text_in) {
  const absl::string_view text(text_in.data(), text_in.size());
  if (text.substr(0, kMagic.size()) != kMagic) return Bad("missing '# kiln-interp v1' line");
  const size_t nl = text.find('\n');
  if (nl == absl::string_view::npos) return Bad("no program after the header");
  absl::string_view header = text.substr(kMagic.size(), nl - kMagic.size());
  Program p;
  std::vector<int64_t> var_idx;
  bool seen_name = false;
  for (absl::string_view field : absl::StrSplit(header, ' ', absl::SkipEmpty())) {
    const size_t eq = field.find('=');
    if (eq == absl::string_view::npos) return Bad("field without '='");
    absl::string_view key = field.substr(0, eq), val = field.substr(eq + 1);
    if (key == "name") {
      p.name = std::string(val);
      seen_name = true;
    } else if (key == "buffers") {
      for (absl::string_view b : absl::StrSplit(val, ',', absl::SkipEmpty())) {
        std::vector<absl::string_view> parts = absl::StrSplit(b, ':');
        BufferParam bp;
        std::optional<DType> dt = parts.size() == 4 ? ParseDType(std::string_view(parts[1].data(), parts[1].size())) : std::nullopt;
        if (!dt || !absl::SimpleAtoi(parts[0], &bp.slot) || !absl::SimpleAtoi(parts[2], &bp.size) ||
            (parts[3] != "in" && parts[3] != "out"))
          return Bad("bad buffer entry");
        bp.dtype = *dt;
        bp.is_output = parts[3] == "out";
        p.buffers.push_back(bp);
      }
    } else if (key == "vars") {
      for (absl::string_view v : absl::StrSplit(val, ',', absl::SkipEmpty())) {
        int64_t k = 0;
        if (!absl::SimpleAtoi(v, &k) || k < 0) return Bad("bad var index");
        var_idx.push_back(k);
      }
    } else if (key == "global") {
      KILN_RETURN_IF_ERROR(ParseInts(val, 3, p.global_size));
    } else if (key == "local") {
      KILN_RETURN_IF_ERROR(ParseInts(val, 3, p.local_size));
    } else if (key == "threads") {
      if (!absl::SimpleAtoi(val, &p.threads) || p.threads < 1 || p.threads > 4096) return Bad("bad threads");
    } else {
      return Bad("unknown field");
    }
  }
  if (!seen_name || !IsValidKernelName(p.name)) return Bad("bad or missing kernel name");
  KILN_ASSIGN_OR_RETURN(std::vector<UOpPtr> uops, ParseGraph(std::string_view(text.data() + nl + 1, text.size() - nl - 1)));
  p.uops = std::move(uops);
  for (int64_t k : var_idx) {
    if (k >= static_cast<int64_t>(p.uops.size()) || p.uops[k]->op() != Op::DEFINE_VAR)
      return Bad("var index does not name a DEFINE_VAR");
    p.vars.push_back(p.uops[k]);
  }
  return p;
}

}  // namespace kiln::codegen
