#pragma once
// Every user-facing failure is a kiln::Error whose message names what was wrong and where
// (op, shapes, file, offset, config key).
#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad shapes or dtypes given to an op; the message starts with the op's name.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A file that is missing, truncated or damaged; the message names the file and the offset.
class FileError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

}  // namespace kiln

#define KILN_CHECK(cond, ...)                                              \
  do {                                                                     \
    if (!(cond)) throw ::kiln::Error(::kiln::detail::concat(__VA_ARGS__)); \
  } while (0)
