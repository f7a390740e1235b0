#include "snn/step_autodiff.hpp"

#include <algorithm>
#include <deque>
#include <limits>

namespace flexkit::snn {

namespace {

constexpr float kLn2 = 0.693147180559945309f;

// Which forward values carry a gradient: those depending, other than through detach or an op
// whose derivative is zero everywhere, on an input, a previous state or a learnable parameter.
std::vector<char> requires_grad(const LoweredStep& step) {
  const auto& instrs = step.body.instrs;
  std::vector<char> rg(instrs.size(), 0);
  for (std::size_t i = 0; i < instrs.size(); ++i) {
    const ir::Instr& in = instrs[i];
    switch (in.op) {
      case ir::Op::seq_in:
      case ir::Op::carried:
        rg[i] = 1;
        break;
      case ir::Op::param:
        rg[i] = step.learnable[static_cast<std::size_t>(in.slot)];
        break;
      case ir::Op::constant:
      case ir::Op::detach:
      case ir::Op::floor:
      case ir::Op::ceil:
      case ir::Op::sign:
      case ir::Op::spike_grad:
      case ir::Op::eq:
      case ir::Op::ne:
      case ir::Op::lt:
      case ir::Op::le:
      case ir::Op::gt:
      case ir::Op::ge:
        rg[i] = 0;
        break;
      default: {
        const int arity = ir::op_info(in.op).arity;
        rg[i] = (arity >= 1 && rg[static_cast<std::size_t>(in.a)]) ||
                (arity >= 2 && rg[static_cast<std::size_t>(in.b)]) ||
                (arity >= 3 && rg[static_cast<std::size_t>(in.c)]);
      }
    }
  }
  return rg;
}

}  // namespace

AdjointResult emit_adjoint(const LoweredStep& step, StepBuilder& out,
                           const std::function<int(int)>& forward_value,
                           const AdjointSeeds& seeds) {
  const auto& instrs = step.body.instrs;
  const std::size_t n = instrs.size();
  const std::vector<char> rg = requires_grad(step);
  std::vector<int> adj(n, -1);
  auto is_zero = [&](int id) {
    const auto k = out.constant_value(id);
    return k && *k == 0.0f;
  };
  auto accumulate = [&](int id, int contribution) {
    if (id < 0 || contribution < 0 || !rg[static_cast<std::size_t>(id)]) return;
    if (is_zero(contribution)) return;
    int& a = adj[static_cast<std::size_t>(id)];
    a = a < 0 ? contribution : out.op(ir::Op::add, a, contribution);
  };
  for (std::size_t o = 0; o < step.outputs.size(); ++o)
    accumulate(step.outputs[o], seeds.outputs[o]);
  for (std::size_t s = 0; s < step.new_states.size(); ++s)
    accumulate(step.new_states[s], seeds.new_states[s]);

  auto fv = [&](int id) { return forward_value(id); };
  // A gradient term multiplied by an exact zero is dropped (x * 0 is not folded in general,
  // because of infinities, but a derivative factor of zero means no dependence).
  auto mul = [&](int x, int y) {
    if (is_zero(x) || is_zero(y)) return out.constant(0.0f);
    return out.op(ir::Op::mul, x, y);
  };
  auto k = [&](float v) { return out.constant(v); };

  for (std::size_t i = n; i-- > 0;) {
    const int g = adj[i];
    if (g < 0) continue;
    const ir::Instr& in = instrs[i];
    const int self = static_cast<int>(i);
    switch (in.op) {
      case ir::Op::neg:
        accumulate(in.a, out.op(ir::Op::neg, g));
        break;
      case ir::Op::abs:
        accumulate(in.a, mul(g, out.op(ir::Op::sign, fv(in.a))));
        break;
      case ir::Op::sqr:
        accumulate(in.a, mul(g, mul(k(2.0f), fv(in.a))));
        break;
      case ir::Op::sqrt:
        accumulate(in.a, out.op(ir::Op::div, mul(g, k(0.5f)), fv(self)));
        break;
      case ir::Op::exp:
        accumulate(in.a, mul(g, fv(self)));
        break;
      case ir::Op::exp2:
        accumulate(in.a, mul(g, mul(fv(self), k(kLn2))));
        break;
      case ir::Op::log:
        accumulate(in.a, out.op(ir::Op::div, g, fv(in.a)));
        break;
      case ir::Op::log2:
        accumulate(in.a, out.op(ir::Op::div, g, mul(fv(in.a), k(kLn2))));
        break;
      case ir::Op::sig: {
        const int y = fv(self);
        accumulate(in.a, mul(g, mul(y, out.op(ir::Op::sub, k(1.0f), y))));
        break;
      }
      case ir::Op::sig2: {
        const int y = fv(self);
        accumulate(in.a, mul(g, mul(mul(y, out.op(ir::Op::sub, k(1.0f), y)), k(kLn2))));
        break;
      }
      case ir::Op::tanh: {
        const int y = fv(self);
        accumulate(in.a, mul(g, out.op(ir::Op::sub, k(1.0f), out.op(ir::Op::sqr, y))));
        break;
      }
      case ir::Op::tanh2: {
        const int y = fv(self);
        accumulate(in.a,
                   mul(g, mul(out.op(ir::Op::sub, k(1.0f), out.op(ir::Op::sqr, y)), k(kLn2))));
        break;
      }
      case ir::Op::reciprocal:
        accumulate(in.a, out.op(ir::Op::neg, mul(g, out.op(ir::Op::sqr, fv(self)))));
        break;
      case ir::Op::spike:
        accumulate(in.a, mul(g, out.spike_grad(fv(in.a), in.surrogate, in.alpha)));
        break;
      case ir::Op::add:
        accumulate(in.a, g);
        accumulate(in.b, g);
        break;
      case ir::Op::sub:
        accumulate(in.a, g);
        accumulate(in.b, out.op(ir::Op::neg, g));
        break;
      case ir::Op::mul:
        if (rg[static_cast<std::size_t>(in.a)]) accumulate(in.a, mul(g, fv(in.b)));
        if (rg[static_cast<std::size_t>(in.b)]) accumulate(in.b, mul(g, fv(in.a)));
        break;
      case ir::Op::div:
        if (rg[static_cast<std::size_t>(in.a)]) accumulate(in.a, out.op(ir::Op::div, g, fv(in.b)));
        if (rg[static_cast<std::size_t>(in.b)])
          accumulate(in.b, out.op(ir::Op::neg, mul(g, out.op(ir::Op::div, fv(self), fv(in.b)))));
        break;
      case ir::Op::pow:
        if (rg[static_cast<std::size_t>(in.a)]) {
          const int d =
              mul(fv(in.b), out.op(ir::Op::pow, fv(in.a), out.op(ir::Op::sub, fv(in.b), k(1.0f))));
          accumulate(in.a, mul(g, d));
        }
        if (rg[static_cast<std::size_t>(in.b)])
          accumulate(in.b, mul(g, mul(fv(self), out.op(ir::Op::log, fv(in.a)))));
        break;
      case ir::Op::maximum:
      case ir::Op::minimum: {
        // Ties split the gradient evenly, as PyTorch does.
        const ir::Op wins = in.op == ir::Op::maximum ? ir::Op::gt : ir::Op::lt;
        const int tie = mul(out.op(ir::Op::eq, fv(in.a), fv(in.b)), k(0.5f));
        if (rg[static_cast<std::size_t>(in.a)])
          accumulate(in.a, mul(g, out.op(ir::Op::add, out.op(wins, fv(in.a), fv(in.b)), tie)));
        if (rg[static_cast<std::size_t>(in.b)])
          accumulate(in.b, mul(g, out.op(ir::Op::add, out.op(wins, fv(in.b), fv(in.a)), tie)));
        break;
      }
      case ir::Op::where:
        if (rg[static_cast<std::size_t>(in.b)])
          accumulate(in.b, out.op(ir::Op::where, fv(in.a), g, k(0.0f)));
        if (rg[static_cast<std::size_t>(in.c)])
          accumulate(in.c, out.op(ir::Op::where, fv(in.a), k(0.0f), g));
        break;
      case ir::Op::clip: {
        const int x = fv(in.a), lo = fv(in.b), hi = fv(in.c);
        if (rg[static_cast<std::size_t>(in.a)])
          accumulate(in.a, mul(g, mul(out.op(ir::Op::ge, x, lo), out.op(ir::Op::le, x, hi))));
        if (rg[static_cast<std::size_t>(in.b)]) accumulate(in.b, mul(g, out.op(ir::Op::lt, x, lo)));
        if (rg[static_cast<std::size_t>(in.c)]) accumulate(in.c, mul(g, out.op(ir::Op::gt, x, hi)));
        break;
      }
      default:  // leaves keep their gradient; the rest have none
        break;
    }
  }

  AdjointResult result;
  result.inputs.assign(step.num_inputs, -1);
  result.old_states.assign(step.new_states.size(), -1);
  result.params.assign(step.runtime_params.size(), -1);
  for (std::size_t i = 0; i < n; ++i) {
    const ir::Instr& in = instrs[i];
    const auto slot = static_cast<std::size_t>(in.slot);
    if (in.op == ir::Op::seq_in) result.inputs[slot] = adj[i];
    if (in.op == ir::Op::carried && slot < result.old_states.size())
      result.old_states[slot] = adj[i];
    if (in.op == ir::Op::param && step.learnable[slot]) result.params[slot] = adj[i];
  }
  return result;
}

namespace {

// Max-flow on a small graph (Edmonds-Karp): step bodies have tens to hundreds of values.
class FlowGraph {
 public:
  static constexpr int kInf = std::numeric_limits<int>::max() / 4;
  explicit FlowGraph(int nodes) : edges_(static_cast<std::size_t>(nodes)) {}
  void add(int from, int to, int capacity) {
    edges_[static_cast<std::size_t>(from)].push_back(
        {to, capacity, static_cast<int>(edges_[static_cast<std::size_t>(to)].size())});
    edges_[static_cast<std::size_t>(to)].push_back(
        {from, 0, static_cast<int>(edges_[static_cast<std::size_t>(from)].size()) - 1});
  }
  void max_flow(int source, int sink) {
    const auto n = edges_.size();
    while (true) {
      std::vector<std::pair<int, int>> parent(n, {-1, -1});
      std::deque<int> queue{source};
      parent[static_cast<std::size_t>(source)] = {source, -1};
      while (!queue.empty() && parent[static_cast<std::size_t>(sink)].first < 0) {
        const int u = queue.front();
        queue.pop_front();
        const auto& out = edges_[static_cast<std::size_t>(u)];
        for (std::size_t e = 0; e < out.size(); ++e) {
          if (out[e].capacity > 0 && parent[static_cast<std::size_t>(out[e].to)].first < 0) {
            parent[static_cast<std::size_t>(out[e].to)] = {u, static_cast<int>(e)};
            queue.push_back(out[e].to);
          }
        }
      }
      if (parent[static_cast<std::size_t>(sink)].first < 0) return;
      int push = kInf;
      for (int v = sink; v != source; v = parent[static_cast<std::size_t>(v)].first) {
        const auto [u, e] = parent[static_cast<std::size_t>(v)];
        push = std::min(push,
                        edges_[static_cast<std::size_t>(u)][static_cast<std::size_t>(e)].capacity);
      }
      for (int v = sink; v != source; v = parent[static_cast<std::size_t>(v)].first) {
        const auto [u, e] = parent[static_cast<std::size_t>(v)];
        Edge& fwd = edges_[static_cast<std::size_t>(u)][static_cast<std::size_t>(e)];
        fwd.capacity -= push;
        edges_[static_cast<std::size_t>(v)][static_cast<std::size_t>(fwd.rev)].capacity += push;
      }
    }
  }
  // Nodes from which the sink is reachable in the residual graph.
  std::vector<char> reaching(int sink) const {
    std::vector<char> seen(edges_.size(), 0);
    seen[static_cast<std::size_t>(sink)] = 1;
    std::deque<int> queue{sink};
    while (!queue.empty()) {
      const int v = queue.front();
      queue.pop_front();
      // u reaches v when the edge u->v still has capacity; that edge's reverse sits in v's list.
      for (const Edge& back : edges_[static_cast<std::size_t>(v)]) {
        const Edge& forward =
            edges_[static_cast<std::size_t>(back.to)][static_cast<std::size_t>(back.rev)];
        if (forward.capacity > 0 && !seen[static_cast<std::size_t>(back.to)]) {
          seen[static_cast<std::size_t>(back.to)] = 1;
          queue.push_back(back.to);
        }
      }
    }
    return seen;
  }

 private:
  struct Edge {
    int to;
    int capacity;
    int rev;
  };
  std::vector<std::vector<Edge>> edges_;
};

}  // namespace

std::vector<int> plan_residuals(const LoweredStep& step, bool inputs_kept) {
  // What the derivative reads: differentiate into a scratch program that starts with a verbatim
  // copy of the forward (so forward ids are kept), with every gradient seed present.
  const auto& instrs = step.body.instrs;
  const int n = static_cast<int>(instrs.size());
  StepBuilder scratch;
  for (const ir::Instr& in : instrs) scratch.raw(in);
  constexpr int kSeedSlot = 1 << 20;  // seed leaves that cannot collide with the forward's
  AdjointSeeds seeds;
  for (std::size_t o = 0; o < step.outputs.size(); ++o)
    seeds.outputs.push_back(scratch.leaf(ir::Op::seq_in, kSeedSlot + static_cast<int>(o)));
  for (std::size_t s = 0; s < step.new_states.size(); ++s)
    seeds.new_states.push_back(scratch.leaf(ir::Op::carried, kSeedSlot + static_cast<int>(s)));
  const AdjointResult grads = emit_adjoint(
      step, scratch, [](int id) { return id; }, seeds);

  std::vector<int> roots;
  for (const auto* list : {&grads.inputs, &grads.old_states, &grads.params})
    for (int r : *list)
      if (r >= 0) roots.push_back(r);
  const auto& all = scratch.program().instrs;
  std::vector<char> live(all.size(), 0), needed(static_cast<std::size_t>(n), 0);
  for (int r : roots) {
    live[static_cast<std::size_t>(r)] = 1;
    if (r < n) needed[static_cast<std::size_t>(r)] = 1;
  }
  for (std::size_t i = all.size(); i-- > 0;) {
    if (!live[i] || ir::op_info(all[i].op).arity == 0) continue;
    for (int operand : {all[i].a, all[i].b, all[i].c}) {
      if (operand < 0) continue;
      live[static_cast<std::size_t>(operand)] = 1;
      if (static_cast<int>(i) >= n && operand < n) needed[static_cast<std::size_t>(operand)] = 1;
    }
  }

  // Minimum vertex cut: value i is split into in 2i -> out 2i+1 with capacity 1 (storing it
  // costs one value per neuron-step); constants and parameters are free and never cut.
  const int source = 2 * n, sink = 2 * n + 1;
  FlowGraph graph(2 * n + 2);
  for (int i = 0; i < n; ++i) {
    const ir::Instr& in = instrs[static_cast<std::size_t>(i)];
    const bool kept = in.op == ir::Op::seq_in && inputs_kept;  // read back, like a parameter
    const bool free = in.op == ir::Op::constant || in.op == ir::Op::param || kept;
    graph.add(2 * i, 2 * i + 1, free ? FlowGraph::kInf : 1);
    if ((in.op == ir::Op::seq_in && !kept) || in.op == ir::Op::carried)
      graph.add(source, 2 * i, FlowGraph::kInf);
    if (ir::op_info(in.op).arity > 0)
      for (int operand : {in.a, in.b, in.c})
        if (operand >= 0) graph.add(2 * operand + 1, 2 * i, FlowGraph::kInf);
    if (needed[static_cast<std::size_t>(i)]) graph.add(2 * i + 1, sink, FlowGraph::kInf);
  }
  graph.max_flow(source, sink);
  // The cut nearest the sink: the latest values, so the backward recomputes the least.
  const std::vector<char> reach = graph.reaching(sink);
  std::vector<int> residuals;
  for (int i = 0; i < n; ++i)
    if (!reach[static_cast<std::size_t>(2 * i)] && reach[static_cast<std::size_t>(2 * i + 1)])
      residuals.push_back(i);
  return residuals;
}

}  // namespace flexkit::snn
