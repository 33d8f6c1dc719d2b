// Fast tokenizer.json loading: a SAX pass that builds a DOM for everything except model.vocab and
// model.merges, which are captured into flat vectors (a 33 MB Gemma-3 tokenizer.json has 262k
// vocab entries and 515k merges; a full nlohmann DOM for them costs seconds).
#include "tokenizer/tok_internal.h"
#include "util/error.h"

namespace cortiq::tok_detail {

namespace {

class Sax : public nlohmann::json_sax<json> {
 public:
  explicit Sax(RawModel& raw) : raw_(raw) {}
  json root;
  std::string error;
  size_t error_pos = 0;

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ != Mode::None) return cap_number(static_cast<double>(v), v >= 0, static_cast<uint64_t>(v));
    return value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ != Mode::None) return cap_number(static_cast<double>(v), true, v);
    return value(json(v));
  }
  bool number_float(number_float_t v, const string_t&) override {
    if (mode_ != Mode::None) return cap_number(v, false, 0);
    return value(json(v));
  }
  bool string(string_t& s) override {
    if (mode_ != Mode::None) return cap_string(s);
    return value(json(std::move(s)));
  }
  bool binary(binary_t&) override { return bad("binary values are not JSON"); }
  bool start_object(std::size_t) override {
    if (mode_ != Mode::None) {
      if (mode_ == Mode::VocabObj || depth_ != 0) return bad(where() + ": unexpected object");
    }
    if (mode_ == Mode::None && enter_capture(true)) return true;
    return open(json::object());
  }
  bool key(string_t& k) override {
    if (mode_ == Mode::VocabObj) {
      cur_key_ = std::move(k);
      return true;
    }
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    if (mode_ == Mode::VocabObj) {
      mode_ = Mode::None;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::VocabArr || mode_ == Mode::Merges) {
      if (depth_ != 0) return bad(where() + ": unexpected nested array");
      depth_ = 1;
      tmp_.clear();
      tmp_num_ = 0;
      has_num_ = false;
      return true;
    }
    if (mode_ == Mode::VocabObj) return bad(where() + ": expected an unsigned id");
    if (enter_capture(false)) return true;
    return open(json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::VocabArr || mode_ == Mode::Merges) {
      if (depth_ == 1) {
        depth_ = 0;
        if (mode_ == Mode::VocabArr) {
          if (tmp_.size() != 1 || !has_num_) return bad(where() + ": expected [piece, score]");
          raw_.uvocab.emplace_back(std::move(tmp_[0]), tmp_num_);
        } else {
          if (tmp_.size() != 2 || has_num_) return bad(where() + ": expected [\"a\", \"b\"]");
          raw_.merges.emplace_back(std::move(tmp_[0]), std::move(tmp_[1]));
        }
        ++index_;
        return true;
      }
      mode_ = Mode::None;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& ex) override {
    if (error.empty()) {
      error = fmt::format("tokenizer.json: invalid JSON at byte {}: {}", pos, ex.what());
      error_pos = pos;
    }
    return false;
  }

 private:
  enum class Mode { None, VocabObj, VocabArr, Merges };
  RawModel& raw_;
  std::vector<json*> stack_;
  std::string key_, cur_key_;
  Mode mode_ = Mode::None;
  int depth_ = 0;
  size_t index_ = 0;
  std::vector<std::string> tmp_;
  double tmp_num_ = 0;
  bool has_num_ = false;

  std::string where() const {
    if (mode_ == Mode::VocabObj) return fmt::format("model.vocab[\"{}\"]", cur_key_);
    return fmt::format("model.{}[{}]", mode_ == Mode::Merges ? "merges" : "vocab", index_);
  }
  bool bad(std::string msg) {
    if (error.empty()) error = std::move(msg);
    return false;
  }
  // Are we about to open root.model.vocab / root.model.merges?
  bool enter_capture(bool is_object) {
    if (stack_.size() != 2 || stack_[0] != &root || !stack_[1]->is_object()) return false;
    auto it = root.find("model");
    if (it == root.end() || &*it != stack_[1]) return false;
    if (key_ == "vocab") {
      raw_.has_vocab = true;
      raw_.vocab_is_array = !is_object;
      mode_ = is_object ? Mode::VocabObj : Mode::VocabArr;
    } else if (key_ == "merges" && !is_object) {
      raw_.has_merges = true;
      mode_ = Mode::Merges;
    } else {
      return false;
    }
    (*stack_[1])[key_] = nullptr;  // placeholder: the field exists
    depth_ = 0;
    index_ = 0;
    return true;
  }
  bool cap_number(double d, bool is_unsigned, uint64_t u) {
    if (mode_ == Mode::VocabObj) {
      if (!is_unsigned || u > 0xFFFFFFFFu) return bad(where() + ": expected an unsigned id");
      raw_.vocab.emplace_back(std::move(cur_key_), static_cast<uint32_t>(u));
      return true;
    }
    if (mode_ == Mode::VocabArr && depth_ == 1 && !has_num_) {
      tmp_num_ = d;
      has_num_ = true;
      return true;
    }
    return bad(where() + ": unexpected number");
  }
  bool cap_string(std::string& s) {
    if (mode_ == Mode::VocabObj) return bad(where() + ": expected an unsigned id");
    if (mode_ == Mode::Merges && depth_ == 0) {
      size_t sp = s.find(' ');
      if (sp == std::string::npos)
        return bad(fmt::format("model.merges[{}]: \"{}\" is not \"a b\"", index_, s));
      raw_.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      ++index_;
      return true;
    }
    if (depth_ == 1 && tmp_.size() < 2) {
      tmp_.push_back(std::move(s));
      return true;
    }
    return bad(where() + ": unexpected string");
  }
  json* place(json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[key_];
    slot = std::move(v);
    return &slot;
  }
  bool value(json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(json&& v) {
    stack_.push_back(place(std::move(v)));
    return true;
  }
};

}  // namespace

json parse_tokenizer_json(std::string_view text, RawModel& raw) {
  Sax sax(raw);
  bool ok = json::sax_parse(text.begin(), text.end(), &sax);
  if (!ok || !sax.error.empty()) {
    if (sax.error.empty()) fail(ErrorKind::Parse, "tokenizer.json: invalid JSON");
    fail(ErrorKind::Parse, "{}", sax.error);
  }
  return std::move(sax.root);
}

}  // namespace cortiq::tok_detail
