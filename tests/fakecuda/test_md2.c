/* TAP test of the MD2 under the fake driver's integrity handshake against RFC 1319's test
 * suite (appendix A.5). Linked with fk_integrity.o alone. */
#include <stdio.h>
#include <string.h>

#include "tests/fakecuda/fk.h"
#include "tests/tap.h"

static const struct {
  const char *msg, *digest;
} suite[] = {
    {"", "8350e5a3e24c153df2275c9f80692773"},
    {"a", "32ec01ec4a6dac72c0ab96fb34c0b5d1"},
    {"abc", "da853b0d3f88d99b30283a69e6ded6bb"},
    {"message digest", "ab4f496bfb2a530b219ff33031fe06b0"},
    {"abcdefghijklmnopqrstuvwxyz", "4e8ddff3650292ab5a4108c3aa47940b"},
    {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
     "da33def2a42df13975352846c30338cd"},
    {"1234567890123456789012345678901234567890"
     "1234567890123456789012345678901234567890",
     "d5976f79d83d3a0dc9806c3c66f3efd8"},
};

int main(void) {
  for (size_t i = 0; i < sizeof suite / sizeof suite[0]; i++) {
    unsigned char d[16];
    char hex[33];
    fk_md2(suite[i].msg, strlen(suite[i].msg), d);
    for (int j = 0; j < 16; j++) {
      snprintf(hex + 2 * j, 3, "%02x", d[j]);
    }
    tap_ok(strcmp(hex, suite[i].digest) == 0, "MD2(\"%.20s\") = %s", suite[i].msg, hex);
  }
  return tap_done();
}
