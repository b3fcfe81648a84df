#pragma once
// NumPy's .npz archives (what np.savez / np.savez_compressed write): a zip whose entries NAME.npy
// each hold one array. Read into and written from onnxtrain::Array, the public API's host array.
//
// Read: stored or deflated entries; .npy format versions 1-3; dtypes float32, float64, int64, int32,
// bool and uint8 in little-endian C order. A Fortran-order, big-endian or other-dtype array is refused
// with an error naming the file, the array and what is wrong, never reinterpreted.
#include <map>
#include <string>

#include "onnxtrain/onnxtrain.h"

namespace onnxtrain::io {

// A zip archive's entries, name -> bytes (stored or deflated entries; directory entries skipped).
// `what` names the file in errors ("data file", "checkpoint"). Throws onnxtrain::Error.
std::map<std::string, std::string> read_zip(const std::string& path, const std::string& what);
// Writes `entries` uncompressed, as numpy.savez does. Throws onnxtrain::Error.
void write_zip(const std::string& path, const std::map<std::string, std::string>& entries);

// Every array of the archive, by name (the entry's name without ".npy"). Throws onnxtrain::Error.
std::map<std::string, Array> read_npz(const std::string& path);

// Writes `arrays` as an uncompressed .npz (np.load reads it back). Throws onnxtrain::Error.
void write_npz(const std::string& path, const std::map<std::string, Array>& arrays);

// One .npy file's bytes <-> an array; `what` names it in errors.
Array parse_npy(const std::string& bytes, const std::string& what);
std::string format_npy(const Array& array);

}  // namespace onnxtrain::io
