#pragma once
// Replacing a file so that a crash or a power loss leaves either the old file or the whole new one.
// A rename alone is not enough: the file system may commit the rename before the new file's data,
// so after a power loss the name can point at an empty file. The data is flushed first, and the
// directory entry after the rename.
#include <string>

namespace onnxtrain::io {

// Flushes `written` (a complete file next to `target`) to stable storage, renames it over `target`,
// then flushes the directory that holds them. Throws onnxtrain::Error naming the path and errno.
void replace_file_durably(const std::string& written, const std::string& target);

}  // namespace onnxtrain::io
