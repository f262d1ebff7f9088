#include "h5_attributes.h"

#include <cstring>
#include <stdexcept>

#include "lft/runtime/check.h"
#include "lft/runtime/error.h"

namespace lft::ckpt::detail {

QuietH5Errors::QuietH5Errors() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

QuietH5Errors::~QuietH5Errors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

namespace {

herr_t collect_error(unsigned n, const H5E_error2_t* err, void* data) {
  auto* lines = static_cast<std::vector<std::string>*>(data);
  if (n < 8 && err) {
    std::string line = err->func_name ? std::string(err->func_name) + "(): " : std::string();
    line += err->desc ? err->desc : "?";
    lines->push_back(line);
  }
  return 0;
}

}  // namespace

std::string h5_error_text() {
  std::vector<std::string> lines;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &lines);
  std::string text;
  for (const auto& l : lines) text += (text.empty() ? "" : "; ") + l;
  return text;
}

namespace {

// Deletes `key` on `obj` if present, then creates it with `type` and `space`.
H5Attribute fresh_attribute(hid_t obj, const std::string& key, hid_t type, hid_t space) {
  if (LFT_H5_CHECK(H5Aexists(obj, key.c_str())) > 0) LFT_H5_CHECK(H5Adelete(obj, key.c_str()));
  return H5Attribute(
      LFT_H5_CHECK(H5Acreate2(obj, key.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT)));
}

H5Datatype vl_string_type(H5T_cset_t cset) {
  H5Datatype t(LFT_H5_CHECK(H5Tcopy(H5T_C_S1)));
  LFT_H5_CHECK(H5Tset_size(t.get(), H5T_VARIABLE));
  LFT_H5_CHECK(H5Tset_cset(t.get(), cset));
  return t;
}

}  // namespace

void write_string_attr(hid_t obj, const std::string& key, const std::string& value) {
  H5Datatype type = vl_string_type(H5T_CSET_UTF8);
  H5Dataspace space(LFT_H5_CHECK(H5Screate(H5S_SCALAR)));
  H5Attribute a = fresh_attribute(obj, key, type.get(), space.get());
  const char* p = value.c_str();
  LFT_H5_CHECK(H5Awrite(a.get(), type.get(), &p));
  LFT_H5_CHECK(a.close());
}

void write_int_attr(hid_t obj, const std::string& key, int64_t value) {
  H5Dataspace space(LFT_H5_CHECK(H5Screate(H5S_SCALAR)));
  H5Attribute a = fresh_attribute(obj, key, H5T_NATIVE_INT64, space.get());
  LFT_H5_CHECK(H5Awrite(a.get(), H5T_NATIVE_INT64, &value));
  LFT_H5_CHECK(a.close());
}

void write_double_attr(hid_t obj, const std::string& key, double value) {
  H5Dataspace space(LFT_H5_CHECK(H5Screate(H5S_SCALAR)));
  H5Attribute a = fresh_attribute(obj, key, H5T_NATIVE_DOUBLE, space.get());
  LFT_H5_CHECK(H5Awrite(a.get(), H5T_NATIVE_DOUBLE, &value));
  LFT_H5_CHECK(a.close());
}

void write_int_vector_attr(hid_t obj, const std::string& key, const std::vector<int64_t>& value) {
  if (value.empty()) {
    H5Dataspace space(LFT_H5_CHECK(H5Screate(H5S_NULL)));
    H5Attribute a = fresh_attribute(obj, key, H5T_NATIVE_INT64, space.get());
    LFT_H5_CHECK(a.close());
    return;
  }
  const hsize_t n = value.size();
  H5Dataspace space(LFT_H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  H5Attribute a = fresh_attribute(obj, key, H5T_NATIVE_INT64, space.get());
  LFT_H5_CHECK(H5Awrite(a.get(), H5T_NATIVE_INT64, value.data()));
  LFT_H5_CHECK(a.close());
}

namespace {

// Opens `key` on `obj` and checks its type class; nullopt + error otherwise.
struct OpenedAttr {
  H5Attribute attr;
  H5Datatype type;
  H5Dataspace space;
  hssize_t npoints = 0;
  H5S_class_t space_class = H5S_NO_CLASS;
};

std::optional<OpenedAttr> open_attr(hid_t obj, const std::string& key, std::string* error) {
  if (H5Aexists(obj, key.c_str()) <= 0) {
    *error = "attribute '" + key + "' is missing";
    return std::nullopt;
  }
  OpenedAttr a;
  a.attr.reset(H5Aopen(obj, key.c_str(), H5P_DEFAULT));
  if (a.attr.valid()) a.type.reset(H5Aget_type(a.attr.get()));
  if (a.type.valid()) a.space.reset(H5Aget_space(a.attr.get()));
  if (!a.space.valid()) {
    *error = "attribute '" + key + "' cannot be opened: " + h5_error_text();
    return std::nullopt;
  }
  a.space_class = H5Sget_simple_extent_type(a.space.get());
  a.npoints = a.space_class == H5S_NULL ? 0 : H5Sget_simple_extent_npoints(a.space.get());
  return a;
}

const char* class_name(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER: return "an integer";
    case H5T_FLOAT: return "a float";
    case H5T_STRING: return "a string";
    default: return "of another HDF5 type class";
  }
}

std::string wrong_kind(const std::string& key, const OpenedAttr& a, const char* wanted) {
  return "attribute '" + key + "' is " + class_name(H5Tget_class(a.type.get())) + " attribute of " +
         std::to_string(a.npoints) + " element(s), not " + wanted;
}

}  // namespace

std::optional<std::string> read_string_attr(hid_t obj, const std::string& key,
                                            std::string* error) {
  auto a = open_attr(obj, key, error);
  if (!a) return std::nullopt;
  if (H5Tget_class(a->type.get()) != H5T_STRING || a->npoints != 1) {
    *error = wrong_kind(key, *a, "a string");
    return std::nullopt;
  }
  if (H5Tis_variable_str(a->type.get()) > 0) {
    H5Datatype mem = vl_string_type(H5Tget_cset(a->type.get()));
    char* p = nullptr;
    if (H5Aread(a->attr.get(), mem.get(), &p) < 0) {
      *error = "attribute '" + key + "' cannot be read: " + h5_error_text();
      return std::nullopt;
    }
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const size_t n = H5Tget_size(a->type.get());
  std::vector<char> buf(n + 1, '\0');
  H5Datatype mem(H5Tcopy(a->type.get()));
  if (!mem.valid() || H5Aread(a->attr.get(), mem.get(), buf.data()) < 0) {
    *error = "attribute '" + key + "' cannot be read: " + h5_error_text();
    return std::nullopt;
  }
  return std::string(buf.data(), strnlen(buf.data(), n));
}

std::optional<int64_t> read_int_attr(hid_t obj, const std::string& key, std::string* error) {
  auto a = open_attr(obj, key, error);
  if (!a) return std::nullopt;
  if (H5Tget_class(a->type.get()) != H5T_INTEGER || a->npoints != 1) {
    *error = wrong_kind(key, *a, "an integer");
    return std::nullopt;
  }
  int64_t v = 0;
  if (H5Aread(a->attr.get(), H5T_NATIVE_INT64, &v) < 0) {
    *error = "attribute '" + key + "' cannot be read: " + h5_error_text();
    return std::nullopt;
  }
  return v;
}

std::optional<double> read_double_attr(hid_t obj, const std::string& key, std::string* error) {
  auto a = open_attr(obj, key, error);
  if (!a) return std::nullopt;
  const H5T_class_t c = H5Tget_class(a->type.get());
  if ((c != H5T_FLOAT && c != H5T_INTEGER) || a->npoints != 1) {
    *error = wrong_kind(key, *a, "a number");
    return std::nullopt;
  }
  double v = 0;
  if (H5Aread(a->attr.get(), H5T_NATIVE_DOUBLE, &v) < 0) {
    *error = "attribute '" + key + "' cannot be read: " + h5_error_text();
    return std::nullopt;
  }
  return v;
}

std::optional<std::vector<int64_t>> read_int_vector_attr(hid_t obj, const std::string& key,
                                                         std::string* error) {
  auto a = open_attr(obj, key, error);
  if (!a) return std::nullopt;
  const int ndims = a->space_class == H5S_SIMPLE ? H5Sget_simple_extent_ndims(a->space.get()) : 0;
  if (H5Tget_class(a->type.get()) != H5T_INTEGER || ndims > 1) {
    *error = wrong_kind(key, *a, "an integer vector");
    return std::nullopt;
  }
  std::vector<int64_t> v(static_cast<size_t>(a->npoints));
  if (!v.empty() && H5Aread(a->attr.get(), H5T_NATIVE_INT64, v.data()) < 0) {
    *error = "attribute '" + key + "' cannot be read: " + h5_error_text();
    return std::nullopt;
  }
  return v;
}

H5Dataspace make_space(const std::vector<int64_t>& shape) {
  if (shape.empty()) return H5Dataspace(LFT_H5_CHECK(H5Screate(H5S_SCALAR)));
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return H5Dataspace(
      LFT_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
}

void select_box(hid_t space, const std::vector<int64_t>& start, const std::vector<int64_t>& count) {
  if (start.empty()) {
    LFT_H5_CHECK(H5Sselect_all(space));
    return;
  }
  std::vector<hsize_t> s(start.begin(), start.end()), c(count.begin(), count.end());
  LFT_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, s.data(), nullptr, c.data(), nullptr));
}

}  // namespace lft::ckpt::detail
