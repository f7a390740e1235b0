#include "ir/op.hpp"

#include <array>

namespace flexkit::ir {

const OpInfo& op_info(Op op) {
  constexpr auto leaf = OpKind::leaf;
  constexpr auto ew = OpKind::elementwise;
  constexpr auto reduction = OpKind::reduction;
  // In the enum's order; the static_assert below catches an op added to one and not the other
  // (a missing entry would leave the last one empty).
  static constexpr std::array<OpInfo, static_cast<std::size_t>(Op::argmin) + 1> kTable = {{
      {"operand", 0, leaf, true, false},
      {"scalar", 0, leaf, true, false},
      {"const", 0, leaf, false, true},
      {"seq_in", 0, leaf, false, true},
      {"carried", 0, leaf, false, true},
      {"param", 0, leaf, false, true},
      {"neg", 1, ew, true, true},
      {"abs", 1, ew, true, true},
      {"sqr", 1, ew, true, true},
      {"sqrt", 1, ew, true, true},
      {"exp", 1, ew, true, true},
      {"exp2", 1, ew, true, true},
      {"log", 1, ew, true, true},
      {"log2", 1, ew, true, true},
      {"sig", 1, ew, true, true},
      {"sig2", 1, ew, true, true},
      {"tanh", 1, ew, true, true},
      {"tanh2", 1, ew, true, true},
      {"reciprocal", 1, ew, true, true},
      {"floor", 1, ew, true, true},
      {"ceil", 1, ew, true, true},
      {"sign", 1, ew, true, true},
      {"spike", 1, ew, false, true},
      {"spike_grad", 1, ew, false, true},
      {"detach", 1, ew, false, true},
      {"add", 2, ew, true, true},
      {"sub", 2, ew, true, true},
      {"mul", 2, ew, true, true},
      {"div", 2, ew, true, true},
      {"pow", 2, ew, true, true},
      {"eq", 2, ew, true, true},
      {"ne", 2, ew, true, true},
      {"lt", 2, ew, true, true},
      {"le", 2, ew, true, true},
      {"gt", 2, ew, true, true},
      {"ge", 2, ew, true, true},
      {"maximum", 2, ew, true, true},
      {"minimum", 2, ew, true, true},
      {"where", 3, ew, true, true},
      {"clip", 3, ew, true, true},
      {"sum", 1, reduction, true, false},
      {"max", 1, reduction, true, false},
      {"min", 1, reduction, true, false},
      {"mean", 1, reduction, true, false},
      {"argmax", 1, reduction, true, false},
      {"argmin", 1, reduction, true, false},
  }};
  static_assert(kTable.back().name == "argmin" &&
                kTable[static_cast<std::size_t>(Op::where)].name == "where");
  return kTable[static_cast<std::size_t>(op)];
}

}  // namespace flexkit::ir
