#include "snn/step_builder.hpp"

#include <bit>
#include <cmath>
#include <cstring>

#include "ir/op_eval.hpp"

namespace flexkit::snn {

namespace {

bool same(const ir::Instr& x, const ir::Instr& y) {
  return x.op == y.op && x.a == y.a && x.b == y.b && x.c == y.c &&
         std::bit_cast<std::uint32_t>(x.constant) == std::bit_cast<std::uint32_t>(y.constant) &&
         x.slot == y.slot && x.surrogate == y.surrogate &&
         std::bit_cast<std::uint32_t>(x.alpha) == std::bit_cast<std::uint32_t>(y.alpha);
}

std::uint64_t hash_of(const ir::Instr& x) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 0x100000001b3ull; };
  mix(static_cast<std::uint64_t>(x.op));
  mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(x.a)));
  mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(x.b)));
  mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(x.c)));
  mix(std::bit_cast<std::uint32_t>(x.constant));
  mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(x.slot)));
  mix(static_cast<std::uint64_t>(x.surrogate));
  mix(std::bit_cast<std::uint32_t>(x.alpha));
  return h;
}

bool is_leaf(ir::Op op) {
  return op == ir::Op::constant || op == ir::Op::seq_in || op == ir::Op::carried ||
         op == ir::Op::param;
}

}  // namespace

int StepBuilder::append(const ir::Instr& instr) {
  const std::uint64_t h = hash_of(instr);
  auto& bucket = by_hash_[h];
  for (int id : bucket)
    if (same(program_.instrs[static_cast<std::size_t>(id)], instr)) return id;
  program_.instrs.push_back(instr);
  const int id = size() - 1;
  bucket.push_back(id);
  return id;
}

int StepBuilder::raw(const ir::Instr& instr) {
  return append(instr);
}

int StepBuilder::constant(float value) {
  ir::Instr in;
  in.op = ir::Op::constant;
  in.constant = value;
  return append(in);
}

int StepBuilder::leaf(ir::Op kind, int slot) {
  ir::Instr in;
  in.op = kind;
  in.slot = slot;
  return append(in);
}

std::optional<float> StepBuilder::constant_value(int id) const {
  const ir::Instr& in = at(id);
  if (in.op == ir::Op::constant) return in.constant;
  return std::nullopt;
}

int StepBuilder::op(ir::Op op, int a, int b, int c) {
  ir::Instr in;
  in.op = op;
  in.a = a;
  in.b = b;
  in.c = c;
  if (auto simpler = simplify(in)) return *simpler;
  return append(in);
}

int StepBuilder::spike(int z, Surrogate surrogate, float alpha) {
  ir::Instr in;
  in.op = ir::Op::spike;
  in.a = z;
  in.surrogate = surrogate;
  in.alpha = alpha;
  if (auto k = constant_value(z)) return constant(ir::eval_op(in, *k, 0, 0));
  return append(in);
}

int StepBuilder::spike_grad(int z, Surrogate surrogate, float alpha) {
  ir::Instr in;
  in.op = ir::Op::spike_grad;
  in.a = z;
  in.surrogate = surrogate;
  in.alpha = alpha;
  if (auto k = constant_value(z)) return constant(ir::eval_op(in, *k, 0, 0));
  return append(in);
}

// Rewrites that keep float32 results unchanged for finite operands. (x * 0 -> 0 would differ for
// an infinite or NaN x; it is applied only where the zero comes from the structure of a
// derivative, never to user arithmetic, by the differentiator not emitting such products.)
std::optional<int> StepBuilder::simplify(const ir::Instr& in) {
  const int arity = ir::op_info(in.op).arity;
  // Plain flags and values (not std::optional) keep GCC's maybe-uninitialized analysis quiet.
  float va = 0, vb = 0, vc = 0;
  auto known = [&](int operand, float& value) {
    const ir::Instr& x = at(operand);
    value = x.constant;
    return x.op == ir::Op::constant;
  };
  const bool ka = arity >= 1 && known(in.a, va);
  const bool kb = arity >= 2 && known(in.b, vb);
  const bool kc = arity >= 3 && known(in.c, vc);
  if (in.op == ir::Op::detach) return ka ? std::optional<int>(in.a) : std::nullopt;
  const bool all_constant = (arity < 1 || ka) && (arity < 2 || kb) && (arity < 3 || kc);
  if (all_constant && !is_leaf(in.op)) return constant(ir::eval_op(in, va, vb, vc));
  auto is_a = [&](float v) { return ka && va == v; };
  auto is_b = [&](float v) { return kb && vb == v; };
  switch (in.op) {
    case ir::Op::add:
      if (is_b(0.0f)) return in.a;
      if (is_a(0.0f)) return in.b;
      break;
    case ir::Op::sub:
      if (is_b(0.0f)) return in.a;
      if (is_a(0.0f)) return op(ir::Op::neg, in.b);
      break;
    case ir::Op::mul:
      if (is_b(1.0f)) return in.a;
      if (is_a(1.0f)) return in.b;
      if (is_b(-1.0f)) return op(ir::Op::neg, in.a);
      if (is_a(-1.0f)) return op(ir::Op::neg, in.b);
      break;
    case ir::Op::div:
      if (is_b(1.0f)) return in.a;
      break;
    case ir::Op::neg:
      if (at(in.a).op == ir::Op::neg) return at(in.a).a;
      break;
    case ir::Op::where:
      if (ka) return va != 0.0f ? in.b : in.c;
      if (in.b == in.c) return in.b;
      break;
    default:
      break;
  }
  return std::nullopt;
}

StepProgram prune_program(const StepProgram& program, std::vector<int*> roots, bool strip_detach) {
  const std::size_t n = program.instrs.size();
  std::vector<int> forward(n);  // detach chains resolved to their source
  for (std::size_t i = 0; i < n; ++i) {
    const ir::Instr& in = program.instrs[i];
    forward[i] = (strip_detach && in.op == ir::Op::detach) ? forward[static_cast<std::size_t>(in.a)]
                                                           : static_cast<int>(i);
  }
  std::vector<char> live(n, 0);
  for (int* r : roots) live[static_cast<std::size_t>(forward[static_cast<std::size_t>(*r)])] = 1;
  for (std::size_t i = n; i-- > 0;) {
    if (!live[i]) continue;
    const ir::Instr& in = program.instrs[i];
    for (int operand : {in.a, in.b, in.c})
      if (operand >= 0 && ir::op_info(in.op).arity > 0)
        live[static_cast<std::size_t>(forward[static_cast<std::size_t>(operand)])] = 1;
  }
  StepBuilder out;
  std::vector<int> renumber(n, -1);
  for (std::size_t i = 0; i < n; ++i) {
    if (!live[i] || forward[i] != static_cast<int>(i)) continue;
    ir::Instr in = program.instrs[i];
    const int arity = ir::op_info(in.op).arity;
    auto map = [&](int operand) {
      return renumber[static_cast<std::size_t>(forward[static_cast<std::size_t>(operand)])];
    };
    if (arity >= 1) in.a = map(in.a);
    if (arity >= 2) in.b = map(in.b);
    if (arity >= 3) in.c = map(in.c);
    renumber[i] = out.raw(in);
  }
  for (int* r : roots)
    *r = renumber[static_cast<std::size_t>(forward[static_cast<std::size_t>(*r)])];
  return out.program();
}

}  // namespace flexkit::snn
