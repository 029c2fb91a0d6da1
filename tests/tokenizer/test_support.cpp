#include "tests/tokenizer/test_support.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <unistd.h>

#include "tokenizer/unicode.h"

namespace ferry::tokenizer::testing {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool valid_utf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// Hand-written samples: scripts and shapes the files on a Debian machine may lack.
const char* const kSamples[] = {
    "Hello, world! It's a test: don't, won't, I'll, we've, they're, I'm, he'd. IT'S LOUD, DON'T.",
    "Ünïcödé façade naïve coöperate — “quotes” ‘single’ «guillemets» …",
    "Ελληνικά: Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "Русский: Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "العربية: نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر ومغلف بجلد أزرق",
    "עברית: דג סקרן שט בים מאוכזב ולפתע מצא חברה",
    "हिन्दी: ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम",
    "தமிழ்: யாமறிந்த மொழிகளிலே தமிழ்மொழி போல் இனிதாவது எங்கும் காணோம்",
    "বাংলা: আমি বাংলায় গান গাই। ০১২৩৪৫৬৭৮৯",
    "ไทย: เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน",
    "日本語: いろはにほへと ちりぬるを わかよたれそ つねならむ。カタカナ、漢字、ｶﾀｶﾅ。",
    "中文：我能吞下玻璃而不伤身体。繁體中文：我能吞下玻璃而不傷身體。",
    "한국어: 다람쥐 헌 쳇바퀴에 타고파. 키스의 고유조건은 입술끼리 만나야 하고",
    "Georgian: ქართული ენა. Armenian: Հայերեն լեզու. Amharic: አማርኛ ቋንቋ",
    "Emoji: 😀😃😄 👩‍👩‍👧‍👦 👍🏽 🇺🇳 🏳️‍🌈 ❤️ 1️⃣ "
    "✈︎",
    "Math: ∀x∈ℝ: x²≥0, ∑ᵢ aᵢ = ∫₀^∞ f(x) dx ≈ 3.14159, ½ ⅓ Ⅻ ① ٣٤٥ ߁",
    "\xEF\xBB\xBF"
    "BOM at the start, and\xEF\xBB\xBF in the middle \xEF\xBB\xBF\xEF\xBB\xBFtwice.",
    "NBSP:\xC2\xA0"
    "a\xC2\xA0\xC2\xA0"
    "b \xC2\xA0 c\xE2\x80\xAF"
    "d\xE3\x80\x80"
    "e\xC2\x85"
    "f\xE2\x80\xA8g\xE2\x80\xA9h\xE1\x9A\x80i",
    "Tabs\tand\t\ttabs\t\n\r\n\r\r\n  \n\n\n   \t \n trailing   ",
    "Numbers: 1 12 123 1234 12345 123456 3.14159265358979 1,000,000 0x7fffffff 1e-10 ٠١٢٣٤٥٦٧٨٩",
    "Paths/and/slashes: /usr/local/bin http://example.com/a/b?c=d&e=f#g C:\\Windows\\System32",
    "Mixed CaseWords: HTTPServer XMLHttpRequest getElementById iPhone McDonald's ǅemal ǈudevit",
    "Combining: e\xCC\x81 a\xCC\x8A n\xCC\x83 \xCC\x81start Z\xCC\xB5\xCD\x8C\xCC\x9A"
    "a\xCC\xB6l\xCC\xB8g\xCC\xB7o",
    "Apostrophes: 's 'S 't 'T 're 'RE 'Re 've 'VE 'm 'M 'll 'LL 'lL 'd 'D '\xC5\xBF x's y'\xC5\xBF "
    "''s",
    "Zero width: a\xE2\x80\x8B"
    "b\xE2\x80\x8C"
    "c\xE2\x80\x8D"
    "d\xE2\x81\xA0"
    "e\xC2\xAD"
    "f",
    "Code: for (int i = 0; i < n; ++i) { if (a[i] != b[i]) return -1; }\n\treturn 0;\n}\n",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true, \"c\": \"d\\n\"}}",
    "yaml:\n  - name: ferry\n    port: 8080\n    tags: [a, b]\n  # comment\n",
};

}  // namespace

std::vector<std::string> conformance_corpus() {
  std::vector<std::string> corpus;
  for (const char* s : kSamples) corpus.emplace_back(s);
  // Long runs that stress the white-space and digit rules and long-piece merging.
  corpus.push_back(std::string(5000, ' ') + "x" + std::string(3000, '\n') + std::string(100, '\t'));
  corpus.push_back(std::string(2000, '7') + " " + std::string(999, '0'));
  corpus.push_back(std::string(3000, 'a'));
  std::string nbsp;
  for (int i = 0; i < 500; ++i) nbsp += "\xC2\xA0";
  corpus.push_back(nbsp + "word" + nbsp);
  std::string words;
  for (int i = 0; i < 300; ++i) words += "supercalifragilistic";
  corpus.push_back(words);

  std::vector<std::string> files = {"/usr/share/common-licenses/GPL-3",
                                    "/usr/share/common-licenses/Apache-2.0",
                                    "/usr/include/stdio.h",
                                    "/usr/include/string.h",
                                    "/usr/lib/python3.11/textwrap.py",
                                    "/usr/lib/python3.11/json/__init__.py",
                                    "/usr/share/vim/vim90/doc/digraph.txt",
                                    "/usr/share/vim/vim90/doc/russian.txt"};
  for (const char* lang :
       {"de", "el", "ja", "ru", "zh_CN", "zh_TW", "tr", "pl", "fr", "be", "eo"}) {
    files.push_back(std::string("/usr/share/gnupg/help.") + lang + ".txt");
  }
  const char* dir = std::getenv("FERRY_TOKENIZER_SOURCE_DIR");
  if (dir) {
    files.push_back(std::string(dir) + "/refs/package.json");
    files.push_back(std::string(dir) + "/../../config/ferry.example.yaml");
  }
  for (const std::string& path : files) {
    std::string text = read_all(path);
    if (text.empty() || !valid_utf8(text)) continue;
    if (text.size() > 200000) text.resize(200000);
    while (!text.empty() && !valid_utf8(text)) text.pop_back();
    corpus.push_back(text);
  }
  return corpus;
}

std::vector<std::string> random_strings(std::uint32_t seed, std::size_t count) {
  std::mt19937 rng(seed);
  auto pick = [&](std::uint32_t n) { return static_cast<std::uint32_t>(rng() % n); };
  static const std::uint32_t kSpaces[] = {
      ' ',    ' ',    ' ',    '\t',   '\n',   '\r',   0x0B,   0x0C,   0x85,   0xA0,   0x1680,
      0x2000, 0x2005, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF, 0x180E, 0x200B};
  static const std::uint32_t kPunct[] = {
      '\'', '\'', '"', '.', ',', '!', '?', '-', '_',    '/',    '/',    '\\',
      '(',  ')',  '{', '}', '<', '>', '|', '@', '#',    '$',    '%',    '^',
      '&',  '*',  '+', '=', '~', '`', ';', ':', 0x2019, 0x2014, 0x00BF, 0x3002};
  static const std::uint32_t kLetters[] = {
      's',   't',   'r',   'e',    'v',    'm',    'l',    'd',    'S',    'T',    'R',
      'E',   'V',   'M',   'L',    'D',    0x17F,  0x212A, 'a',    'Z',    0xE9,   0xC9,
      0x1C5, 0x1C8, 0x2B0, 0x3042, 0x4E2D, 0xAC00, 0x0627, 0x05D0, 0x0905, 0x0E01, 0x10D0};
  static const std::uint32_t kMarks[] = {0x300, 0x301,  0x308,  0x327,  0x36F,   0x93F,
                                         0x94D, 0x0E31, 0x20DD, 0xFE0F, 0x1F3FB, 0x200D};
  static const std::uint32_t kNumbers[] = {'0',    '1',    '5',  '9',    0x660,  0x966,
                                           0xFF11, 0x2160, 0xBD, 0x2460, 0x1D7CE};
  static const std::uint32_t kEmoji[] = {0x1F600, 0x1F44D, 0x1F469, 0x1F1FA,
                                         0x2764,  0x1F3F3, 0x2708,  0x1F9D1};
  std::vector<std::string> out;
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    std::string s;
    const std::uint32_t len = pick(i % 10 == 0 ? 200 : 24);
    for (std::uint32_t k = 0; k < len; ++k) {
      std::uint32_t cp;
      switch (pick(10)) {
        case 0:
          cp = kSpaces[pick(std::size(kSpaces))];
          break;
        case 1:
          cp = kPunct[pick(std::size(kPunct))];
          break;
        case 2:
        case 3:
          cp = kLetters[pick(std::size(kLetters))];
          break;
        case 4:
          cp = kMarks[pick(std::size(kMarks))];
          break;
        case 5:
          cp = kNumbers[pick(std::size(kNumbers))];
          break;
        case 6:
          cp = kEmoji[pick(std::size(kEmoji))];
          break;
        case 7:
          cp = 0x20 + pick(0x5F);
          break;
        case 8:
          cp = pick(0x800);
          break;
        default:
          do {
            cp = pick(2) ? pick(0x10000) : pick(0x110000);
          } while (cp >= 0xD800 && cp <= 0xDFFF);
      }
      append_utf8(s, cp);
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string refs_dir() {
  const char* dir = std::getenv("FERRY_TOKENIZER_SOURCE_DIR");
  return std::string(dir ? dir : "tests/tokenizer") + "/refs";
}

bool refs_installed() {
  return std::filesystem::exists(refs_dir() + "/node_modules/.ferry-lock-sha256");
}

namespace {
RefResult run_reference_text(const std::string& script, const std::vector<std::string>& args,
                             const std::string& input_json);
}  // namespace

RefResult run_reference(const std::string& script, const std::vector<std::string>& args,
                        const nlohmann::json& input) {
  return run_reference_text(script, args,
                            input.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict));
}

RefResult run_reference(const std::string& script, const std::vector<std::string>& args,
                        const nlohmann::ordered_json& input) {
  return run_reference_text(
      script, args, input.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::strict));
}

namespace {
RefResult run_reference_text(const std::string& script, const std::vector<std::string>& args,
                             const std::string& input_json) {
  RefResult result;
  const auto tmp =
      std::filesystem::temp_directory_path() /
      ("ferry_tok_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(tmp);
  const std::string in_path = (tmp / "in.json").string();
  const std::string out_path = (tmp / "out.json").string();
  {
    std::ofstream in(in_path, std::ios::binary);
    in << input_json;
  }
  std::string cmd = "node '" + refs_dir() + "/" + script + "'";
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " '" + in_path + "' '" + out_path + "' 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  std::string log;
  if (pipe) {
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) log.append(buf, n);
    const int rc = ::pclose(pipe);
    if (rc != 0)
      result.error = "reference failed (" + std::to_string(rc) + "): " + cmd + "\n" + log;
  } else {
    result.error = "cannot run " + cmd;
  }
  if (result.error.empty()) {
    try {
      result.json = nlohmann::json::parse(read_all(out_path));
    } catch (const std::exception& e) {
      result.error = std::string("bad reference output: ") + e.what();
    }
  }
  std::filesystem::remove_all(tmp);
  return result;
}
}  // namespace

std::string hex_escape(const std::string& s) {
  std::string out;
  char buf[8];
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b < 0x7F && b != '\\') {
      out.push_back(c);
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02X", b);
      out += buf;
    }
  }
  return out;
}

}  // namespace ferry::tokenizer::testing
