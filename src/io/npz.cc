#include "io/npz.h"

#include <zip.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <memory>

#include "onnxtrain/error.h"

namespace onnxtrain::io {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

[[noreturn]] void fail(const std::string& message) { throw Error(message); }

bool host_is_little_endian() {
  const uint16_t probe = 1;
  unsigned char first;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

struct Dtype {
  const char* descr;  // as NumPy writes it: byte order, kind, size
  ElementType type;
};
constexpr Dtype kDtypes[] = {
    {"<f4", ElementType::Float32}, {"<f8", ElementType::Float64}, {"<i8", ElementType::Int64},
    {"<i4", ElementType::Int32},   {"|b1", ElementType::Bool},    {"|u1", ElementType::UInt8},
};

// The .npy header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
// Only that form (what numpy.lib.format writes) is accepted.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& what) : text_(text), what_(what) {}

  // The text right after "'key':", skipping blanks; fails when the key is missing.
  size_t value_of(const std::string& key) {
    const std::string quoted = "'" + key + "'";
    size_t at = text_.find(quoted);
    if (at == std::string::npos) fail(what_ + ": the .npy header has no '" + key + "' entry: " + text_);
    at = skip_blanks(at + quoted.size());
    if (at >= text_.size() || text_[at] != ':') fail(what_ + ": malformed .npy header: " + text_);
    return skip_blanks(at + 1);
  }

  std::string string_value(const std::string& key) {
    size_t at = value_of(key);
    if (at >= text_.size() || text_[at] != '\'') {
      fail(what_ + ": its dtype is not a plain NumPy type (structured arrays are not supported): " + text_);
    }
    const size_t end = text_.find('\'', at + 1);
    if (end == std::string::npos) fail(what_ + ": malformed .npy header: " + text_);
    return text_.substr(at + 1, end - at - 1);
  }

  bool bool_value(const std::string& key) {
    const size_t at = value_of(key);
    if (text_.compare(at, 4, "True") == 0) return true;
    if (text_.compare(at, 5, "False") == 0) return false;
    fail(what_ + ": malformed '" + key + "' in the .npy header: " + text_);
  }

  std::vector<int64_t> tuple_value(const std::string& key) {
    size_t at = value_of(key);
    if (at >= text_.size() || text_[at] != '(') fail(what_ + ": malformed shape in the .npy header: " + text_);
    std::vector<int64_t> dims;
    at = skip_blanks(at + 1);
    while (at < text_.size() && text_[at] != ')') {
      if (!std::isdigit(static_cast<unsigned char>(text_[at]))) {
        fail(what_ + ": malformed shape in the .npy header: " + text_);
      }
      int64_t dim = 0;
      while (at < text_.size() && std::isdigit(static_cast<unsigned char>(text_[at]))) {
        if (__builtin_mul_overflow(dim, int64_t{10}, &dim) || __builtin_add_overflow(dim, text_[at] - '0', &dim)) {
          fail(what_ + ": a dimension of its shape overflows 64 bits: " + text_);
        }
        ++at;
      }
      dims.push_back(dim);
      at = skip_blanks(at);
      if (at < text_.size() && text_[at] == ',') at = skip_blanks(at + 1);
    }
    if (at >= text_.size()) fail(what_ + ": malformed shape in the .npy header: " + text_);
    return dims;
  }

 private:
  size_t skip_blanks(size_t at) const {
    while (at < text_.size() && (text_[at] == ' ' || text_[at] == '\t')) ++at;
    return at;
  }
  const std::string& text_;
  const std::string& what_;
};

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

std::string zip_error_text(int code) {
  zip_error_t error;
  zip_error_init_with_code(&error, code);
  std::string text = zip_error_strerror(&error);
  zip_error_fini(&error);
  return text;
}

struct ZipCloser {
  void operator()(zip_t* archive) const { zip_discard(archive); }
};
struct ZipFileCloser {
  void operator()(zip_file_t* file) const { zip_fclose(file); }
};

}  // namespace

Array parse_npy(const std::string& bytes, const std::string& what) {
  if (bytes.size() < kMagicSize + 4 || bytes.compare(0, kMagicSize, kMagic, kMagicSize) != 0) {
    fail(what + " is not a .npy array (no NUMPY magic)");
  }
  const int major = static_cast<unsigned char>(bytes[kMagicSize]);
  size_t header_size = 0, header_start = 0;
  if (major == 1) {
    header_size = static_cast<unsigned char>(bytes[8]) | static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8;
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(what + " is truncated inside its .npy header");
    for (int i = 3; i >= 0; --i) header_size = header_size << 8 | static_cast<unsigned char>(bytes[8 + i]);
    header_start = 12;
  } else {
    fail(what + " has .npy format version " + std::to_string(major) + "; versions 1 to 3 are supported");
  }
  if (header_size > bytes.size() - header_start) fail(what + " is truncated inside its .npy header");
  std::string header = bytes.substr(header_start, header_size);
  while (!header.empty() && std::isspace(static_cast<unsigned char>(header.back()))) header.pop_back();
  HeaderParser parser(header, what);

  const std::string descr = parser.string_value("descr");
  if (!host_is_little_endian()) fail("reading .npy arrays needs a little-endian host");
  Array array;
  bool known = false;
  for (const Dtype& dtype : kDtypes) {
    // NumPy writes '|' for one-byte types, '<' or '=' (native) otherwise; both mean little-endian here.
    const bool same = descr == dtype.descr || (descr.size() == 3 && descr[0] == '=' && descr.substr(1) == dtype.descr + 1);
    if (same) {
      array.type = dtype.type;
      known = true;
    }
  }
  if (!known) {
    if (!descr.empty() && descr[0] == '>') {
      fail(what + " is big-endian (dtype '" + descr + "'); save it little-endian, e.g. with a.astype(a.dtype.newbyteorder('<'))");
    }
    fail(what + " has dtype '" + descr + "', which is not supported; use float32, float64, int64, int32, bool or uint8");
  }
  if (parser.bool_value("fortran_order")) {
    fail(what + " is stored in Fortran order; save it in C order, e.g. with np.ascontiguousarray");
  }
  array.shape = parser.tuple_value("shape");

  uint64_t numel = 1;
  for (int64_t dim : array.shape) {
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dim), &numel)) fail(what + ": its shape overflows 64 bits");
  }
  uint64_t data_size = 0;
  if (__builtin_mul_overflow(numel, element_size(array.type), &data_size)) fail(what + ": its size overflows 64 bits");
  const size_t data_start = header_start + header_size;
  if (bytes.size() - data_start != data_size) {
    fail(what + " holds " + std::to_string(bytes.size() - data_start) + " data bytes, but its shape " +
         shape_string(array.shape) + " of " + element_type_name(array.type) + " needs " + std::to_string(data_size));
  }
  array.bytes.assign(bytes.begin() + static_cast<std::ptrdiff_t>(data_start), bytes.end());
  return array;
}

std::string format_npy(const Array& array) {
  const char* descr = nullptr;
  for (const Dtype& dtype : kDtypes) {
    if (dtype.type == array.type) descr = dtype.descr;
  }
  if (descr == nullptr) fail("cannot write an array of an unknown element type to .npy");
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " +
                       shape_string(array.shape) + ", }";
  // numpy.lib.format pads with spaces and a newline so that the data starts 64-byte aligned.
  const size_t unpadded = kMagicSize + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 0xffff) fail("the .npy header of an array of shape " + shape_string(array.shape) + " is too long");
  std::string out(kMagic, kMagicSize);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(reinterpret_cast<const char*>(array.bytes.data()), array.bytes.size());
  return out;
}

std::map<std::string, std::string> read_zip(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail(what + " " + path + " does not exist");
  if (std::filesystem::is_directory(path, ec)) fail(what + " " + path + " is a directory, not a file");
  int code = 0;
  std::unique_ptr<zip_t, ZipCloser> archive(zip_open(path.c_str(), ZIP_RDONLY, &code));
  if (!archive) fail(what + " " + path + " is not a readable .npz (zip) file: " + zip_error_text(code));

  std::map<std::string, std::string> out;
  const zip_int64_t entries = zip_get_num_entries(archive.get(), 0);
  for (zip_int64_t i = 0; i < entries; ++i) {
    zip_stat_t stat;
    if (zip_stat_index(archive.get(), static_cast<zip_uint64_t>(i), 0, &stat) != 0) {
      fail(path + ": cannot read entry " + std::to_string(i) + ": " + zip_strerror(archive.get()));
    }
    const std::string name = stat.name;
    if (!name.empty() && name.back() == '/') continue;  // a directory entry
    std::unique_ptr<zip_file_t, ZipFileCloser> file(zip_fopen_index(archive.get(), static_cast<zip_uint64_t>(i), 0));
    if (!file) fail("entry '" + name + "' of " + path + " cannot be opened: " + zip_strerror(archive.get()));
    std::string bytes;
    char chunk[1 << 16];
    zip_int64_t got;
    while ((got = zip_fread(file.get(), chunk, sizeof chunk)) > 0) bytes.append(chunk, static_cast<size_t>(got));
    if (got < 0) fail("entry '" + name + "' of " + path + " cannot be read (corrupt archive?): " +
                      zip_file_strerror(file.get()));
    out[name] = std::move(bytes);
  }
  return out;
}

void write_zip(const std::string& path, const std::map<std::string, std::string>& entries) {
  int code = 0;
  std::unique_ptr<zip_t, ZipCloser> archive(zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code));
  if (!archive) fail("cannot create " + path + ": " + zip_error_text(code));
  // libzip reads the buffers only at zip_close, and `entries` outlives it.
  for (const auto& [name, payload] : entries) {
    zip_source_t* source = zip_source_buffer(archive.get(), payload.data(), payload.size(), 0);
    if (source == nullptr) fail("cannot write " + path + ": " + zip_strerror(archive.get()));
    const zip_int64_t index = zip_file_add(archive.get(), name.c_str(), source, ZIP_FL_OVERWRITE | ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      zip_source_free(source);
      fail("cannot write '" + name + "' to " + path + ": " + zip_strerror(archive.get()));
    }
    zip_set_file_compression(archive.get(), static_cast<zip_uint64_t>(index), ZIP_CM_STORE, 0);
  }
  zip_t* raw = archive.release();
  if (zip_close(raw) != 0) {
    const std::string reason = zip_strerror(raw);
    zip_discard(raw);
    fail("cannot write " + path + ": " + reason);
  }
}

std::map<std::string, Array> read_npz(const std::string& path) {
  std::map<std::string, Array> arrays;
  for (const auto& [entry, bytes] : read_zip(path, "data file")) {
    if (entry.size() < 4 || entry.compare(entry.size() - 4, 4, ".npy") != 0)
      fail(path + " holds '" + entry + "', which is not a .npy array; is it an .npz file?");
    const std::string name = entry.substr(0, entry.size() - 4);
    arrays[name] = parse_npy(bytes, "array '" + name + "' of " + path);
  }
  return arrays;
}

void write_npz(const std::string& path, const std::map<std::string, Array>& arrays) {
  std::map<std::string, std::string> entries;
  for (const auto& [name, array] : arrays) entries[name + ".npy"] = format_npy(array);
  write_zip(path, entries);
}

}  // namespace onnxtrain::io
