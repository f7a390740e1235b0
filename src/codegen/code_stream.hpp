// An indenting stream for generated source: code is written line by line and blocks open and
// close through Scope objects, so generated text is indented consistently and no generator
// types spaces or braces by hand (GeNN's CodeStream does the same).
#pragma once
#include <sstream>
#include <string>

namespace flexkit::codegen {

class CodeStream {
 public:
  // One line at the current indentation, from any streamable parts.
  template <class... Parts>
  CodeStream& line(const Parts&... parts) {
    out_ << std::string(static_cast<std::size_t>(indent_) * 2, ' ');
    (out_ << ... << parts);
    out_ << '\n';
    return *this;
  }
  CodeStream& blank() {
    out_ << '\n';
    return *this;
  }
  std::string str() const { return out_.str(); }

  // Writes `head {`; lines written while the Scope lives are indented one more level; `}` when
  // it ends.
  class Scope {
   public:
    template <class... Parts>
    explicit Scope(CodeStream& os, const Parts&... head) : os_(os) {
      os_.line(head..., sizeof...(Parts) ? " {" : "{");
      ++os_.indent_;
    }
    ~Scope() {
      --os_.indent_;
      os_.line("}");
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CodeStream& os_;
  };

 private:
  std::ostringstream out_;
  int indent_ = 0;
};

}  // namespace flexkit::codegen
