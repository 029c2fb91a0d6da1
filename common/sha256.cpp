#include "common/sha256.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

namespace ferry {

namespace {

// The algorithm is fetched from the provider once, and each thread keeps its digest context:
// EVP_Digest with EVP_sha256() fetches and allocates on every call (OpenSSL 3), which cost
// more than hashing an API key on the request path.
const EVP_MD* sha256_md() {
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

struct DigestContext {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~DigestContext() { EVP_MD_CTX_free(ctx); }
};

}  // namespace

std::string sha256_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  thread_local DigestContext dc;
  const EVP_MD* md = sha256_md();
  bool ok = md != nullptr && dc.ctx != nullptr && EVP_DigestInit_ex2(dc.ctx, md, nullptr) == 1 &&
            EVP_DigestUpdate(dc.ctx, data.data(), data.size()) == 1 &&
            EVP_DigestFinal_ex(dc.ctx, digest, &len) == 1;
  if (!ok) EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xf]);
  }
  return out;
}

}  // namespace ferry
