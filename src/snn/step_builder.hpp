// Builds StepPrograms instruction by instruction, simplifying as it goes: constant operands are
// folded with the kernels' own float32 math, identities (x + 0, x * 1, where(1, a, b), ...) are
// dropped and equal instructions are shared. Lowering, differentiation and kernel assembly all
// emit through it, so every program a backend sees is already in this reduced form.
#pragma once
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "ir/step_kernel.hpp"

namespace flexkit::snn {

class StepBuilder {
 public:
  int constant(float value);
  int leaf(ir::Op kind, int slot);
  int op(ir::Op op, int a, int b = -1, int c = -1);
  int spike(int z, Surrogate surrogate, float alpha);
  int spike_grad(int z, Surrogate surrogate, float alpha);
  // Appends an instruction exactly as given (operands already in this program), without
  // simplification: for copying a program that is already reduced.
  int raw(const ir::Instr& instr);

  std::optional<float> constant_value(int id) const;
  const ir::Instr& at(int id) const { return program_.instrs[static_cast<std::size_t>(id)]; }
  int size() const { return static_cast<int>(program_.instrs.size()); }
  const StepProgram& program() const { return program_; }

 private:
  int append(const ir::Instr& instr);  // shared with an equal earlier instruction if any
  std::optional<int> simplify(const ir::Instr& instr);

  StepProgram program_;
  std::unordered_map<std::uint64_t, std::vector<int>> by_hash_;
};

// The program restricted to what `roots` depend on, renumbered in order; `roots` are rewritten
// to the new ids. Every detach is replaced by its operand when strip_detach is set.
StepProgram prune_program(const StepProgram& program, std::vector<int*> roots, bool strip_detach);

}  // namespace flexkit::snn
