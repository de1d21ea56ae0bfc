// RunCommand: what a shell command prints (stdout and stderr together), for tests that compare with a Python
// reference script (llama_ref.py, tokenizer_ref.py, chat_template_ref.py, gguf_ref.py). "cannot run ..." when the
// shell cannot start.
#pragma once

#include <cstdio>
#include <string>

namespace kiln::test_util {

inline std::string RunCommand(const std::string& cmd) {
  std::FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return "cannot run " + cmd;
  std::string text;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) text.append(buf, n);
  pclose(p);
  return text;
}

}  // namespace kiln::test_util
