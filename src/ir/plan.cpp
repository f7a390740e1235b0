#include "ir/plan.hpp"

#include <cstring>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::ir {

using detail::cat;

namespace {

// Drops leading size-1 axes until `shape` has at most `rank` axes (NumPy assignment rule).
Shape drop_leading_ones(Shape shape, std::size_t rank) {
  while (shape.size() > rank && shape.front() == 1) shape.erase(shape.begin());
  return shape;
}

// `array` viewed with the iteration shape: leading ones removed, then broadcast.
Array fit_to(const Array& array, const Shape& shape) {
  Shape own = drop_leading_ones(array.shape(), shape.size());
  Array a = own == array.shape() ? array : array.reshape(own);
  return a.shape() == shape ? a : a.broadcast_to(shape);
}

bool same_view(const Array& a, const Array& b) {
  return a.shares_storage(b) && a.dtype() == b.dtype() && a.offset() == b.offset() &&
         a.shape() == b.shape() && a.strides() == b.strides();
}

// One program being built: a subtree that appears twice — the same object or an equal tree
// built again — is computed once. Equal trees are found by value numbering: an instruction equal
// to one already emitted (same op, same argument values, same leaf) is that value, so no tree is
// ever compared or named as a whole.
struct ProgramBuilder {
  Program& program;
  // Nodes already lowered and their values: a few dozen, so a scan beats a hash map's
  // allocations (this runs on every assignment).
  std::vector<std::pair<const Node*, std::int32_t>> by_node;

  const std::int32_t* find(const Node* node) const {
    for (const auto& [n, v] : by_node)
      if (n == node) return &v;
    return nullptr;
  }
};

// A text naming a tree by its structure and leaves: equal trees get equal keys. Operands are
// named by storage address and layout, scalars by their exact bits. Only reductions are named
// (a reduction read twice in one assignment is computed once, into one temporary).
class TreeKeys {
 public:
  const std::string& key(const NodePtr& node) {
    if (auto it = keys_.find(node.get()); it != keys_.end()) return it->second;
    std::ostringstream k;
    k << static_cast<int>(node->op);
    if (node->op == Op::operand) {
      const Array& a = node->array;
      k << "@" << ArrayAccess::storage(a).data() << ":" << static_cast<int>(a.dtype()) << ":"
        << a.offset() << shape_str(a.shape()) << shape_str(a.strides());
    } else if (node->op == Op::scalar) {
      std::uint64_t bits;
      std::memcpy(&bits, &node->value, sizeof bits);
      k << "#" << bits;
    } else {
      k << "/" << node->axis << "(";
      for (const NodePtr& a : node->args) k << key(a) << ",";
      k << ")";
    }
    return keys_[node.get()] = k.str();
  }

 private:
  std::map<const Node*, std::string> keys_;
};

class Planner {
 public:
  Planner(const Array& out, const AssignOptions& options) : out_(out), options_(options) {}

  Plan plan(const NodePtr& root) {
    check_devices(root);
    Shape root_shape = drop_leading_ones(root->shape, out_.shape().size());
    Shape joint = broadcast_shapes(root_shape, out_.shape(), "assign");
    if (root_shape.size() > out_.shape().size() || joint != out_.shape())
      throw ShapeError(cat("assign: the expression's shape ", shape_str(root->shape),
                           " does not broadcast to the output ", out_.describe()));
    Stage final_stage;
    if (op_info(root->op).kind == OpKind::reduction && root_shape == out_.shape()) {
      final_stage = reduction_stage(*root, out_.reshape(root->shape));
    } else {
      final_stage.body.shape = out_.shape();
      ProgramBuilder builder{final_stage.body, {}};
      lower(root, builder);
      final_stage.target = out_;
    }
    final_stage.iwl_policy = options_.iwl_policy;
    if (out_.dtype() == DType::flex16 && options_.rounding == Rounding::stochastic)
      final_stage.stochastic_seed = options_.seed;
    protect_from_aliasing(final_stage);
    plan_.stages.push_back(std::move(final_stage));
    // A flex16 output whose exponent will change (exact policy, or an explicit iwl other than
    // its own) changes how its own mantissas read: every stage must read such an operand from a
    // snapshot. At its own iwl (an Autoflex write in steady state) nothing changes.
    if (out_.dtype() == DType::flex16 &&
        (options_.iwl_policy == IwlPolicy::exact || (options_.iwl && *options_.iwl != out_.iwl())))
      for (Stage& stage : plan_.stages)
        for (Array& operand : stage.body.operands)
          if (operand.shares_storage(out_))
            operand = operand.clone().broadcast_to(stage.body.shape);
    return std::move(plan_);
  }

 private:
  void check_devices(const NodePtr& node) {
    if (node->op == Op::operand && node->array.device() != out_.device())
      throw DeviceError(cat("assign: operand ", node->array.describe(), " is not on ",
                            out_.device().str(), ", the device of the output ", out_.describe(),
                            "; copy it with copy_to() first"));
    for (const NodePtr& a : node->args) check_devices(a);
  }

  // A reduction node as a stage writing `target` (keep-dims shape of the node).
  Stage reduction_stage(const Node& node, const Array& target) {
    Stage s;
    s.body.shape = node.args[0]->shape;
    ProgramBuilder builder{s.body, {}};
    lower(node.args[0], builder);
    s.reduce = node.op;
    s.axis = node.axis;
    s.target = target;
    return s;
  }

  // The value of `instr`: an equal instruction already in the program, or this one appended.
  // Programs are a few dozen instructions, so a scan costs less than any map.
  std::int32_t emit(Program& p, Instr instr) {
    for (std::size_t i = 0; i < p.code.size(); ++i) {
      const Instr& e = p.code[i];
      if (e.op == instr.op && e.a == instr.a && e.b == instr.b && e.c == instr.c &&
          e.slot == instr.slot && e.constant == instr.constant && e.surrogate == instr.surrogate &&
          e.alpha == instr.alpha)
        return static_cast<std::int32_t>(i);
    }
    p.code.push_back(instr);
    return static_cast<std::int32_t>(p.code.size() - 1);
  }

  // A scalar's slot: one per distinct value (by its bits).
  static std::int32_t scalar_slot(Program& p, double value) {
    for (std::size_t i = 0; i < p.scalars.size(); ++i)
      if (std::memcmp(&p.scalars[i], &value, sizeof value) == 0)
        return static_cast<std::int32_t>(i);
    p.scalars.push_back(value);
    return static_cast<std::int32_t>(p.scalars.size() - 1);
  }

  std::int32_t operand_slot(Program& p, const Array& array) {
    Array view = fit_to(array, p.shape);
    for (std::size_t i = 0; i < p.operands.size(); ++i)
      if (same_view(p.operands[i], view)) return static_cast<std::int32_t>(i);
    p.operands.push_back(std::move(view));
    return static_cast<std::int32_t>(p.operands.size() - 1);
  }

  std::int32_t lower(const NodePtr& node, ProgramBuilder& builder) {
    Program& p = builder.program;
    if (const std::int32_t* known = builder.find(node.get())) return *known;
    std::int32_t v = -1;
    const OpInfo& info = op_info(node->op);
    if (node->op == Op::operand) {
      v = emit(p, {Op::operand, -1, -1, -1, operand_slot(p, node->array)});
    } else if (node->op == Op::scalar) {
      v = emit(p, {Op::scalar, -1, -1, -1, scalar_slot(p, node->value)});
    } else if (info.kind == OpKind::reduction) {
      // Computed once per assignment into a temporary, then read like any operand.
      const std::string& key = keys_.key(node);
      auto found = reductions_.find(key);
      if (found == reductions_.end()) {
        bool index = node->op == Op::argmax || node->op == Op::argmin;
        Array temp = Array::empty(node->shape, index ? DType::i32 : DType::f32, out_.device());
        plan_.stages.push_back(reduction_stage(*node, temp));
        found = reductions_.emplace(key, temp).first;
      }
      v = emit(p, {Op::operand, -1, -1, -1, operand_slot(p, found->second)});
    } else {
      std::int32_t args[3] = {-1, -1, -1};
      for (std::size_t i = 0; i < node->args.size(); ++i) args[i] = lower(node->args[i], builder);
      v = emit(p, {node->op, args[0], args[1], args[2], -1});
    }
    builder.by_node.emplace_back(node.get(), v);
    return v;
  }

  // The final stage writes `out`: any operand that shares its storage but is not the very
  // element being written (another offset or layout, or any read by a reduction) is replaced
  // by a snapshot taken now, before anything is written.
  void protect_from_aliasing(Stage& s) {
    for (Array& operand : s.body.operands) {
      if (!operand.shares_storage(out_)) continue;
      bool same_element = !s.reduce && same_view(operand, s.target);
      if (!same_element) operand = operand.clone().broadcast_to(s.body.shape);
    }
  }

  Array out_;
  AssignOptions options_;
  Plan plan_;
  TreeKeys keys_;
  std::map<std::string, Array> reductions_;
};

}  // namespace

Plan make_plan(const Array& out, const NodePtr& root, const AssignOptions& options) {
  if (!out.defined()) throw ValueError("assign: the output is an empty array handle");
  if (!out.writable())
    throw ValueError(cat("assign: the output ", out.describe(),
                         " is a read-only view (broadcast_to); write to its source instead"));
  return Planner(out, options).plan(root);
}

std::string to_string(const Program& program) {
  std::ostringstream s;
  s << "program over " << shape_str(program.shape) << "\n";
  for (std::size_t i = 0; i < program.code.size(); ++i) {
    const Instr& in = program.code[i];
    s << "  v" << i << " = " << op_info(in.op).name;
    if (in.op == Op::operand)
      s << " " << program.operands[in.slot].describe();
    else if (in.op == Op::scalar)
      s << " " << program.scalars[in.slot];
    for (std::int32_t a : {in.a, in.b, in.c})
      if (a >= 0) s << " v" << a;
    s << "\n";
  }
  return s.str();
}

}  // namespace flexkit::ir
