/* The answer to the runtime's integrity handshake (export table d4082055, slot 1).
 *
 * The runtime calls the slot three times at start-up with version = its own version * 1 + 0, 1
 * and 2 (13000, 13001, 13002 for CUDA 13.0) and the current time, and compares the 16 bytes it
 * gets with its own computation. Versions ending in 0 and 1 have fixed answers; the others are
 * HMAC-MD2 (RFC 2104 over RFC 1319) under a fixed 16-byte key of a message made of: the
 * driver's version, the requested version, the process and thread ids (32 bits each), the
 * addresses of the runtime-interface table, of the integrity table and of the slot's function,
 * the time; then per device its UUID and PCI domain, bus and device numbers. The layout is the
 * public reconstruction of the protocol (README.md, "Private export tables").
 *
 * Pure computation: no lock, no state.
 */
#include <string.h>

#include "tests/fakecuda/fk.h"

/* RFC 1319's permutation of 0..255 built from the digits of pi. */
static const unsigned char pi_subst[256] = {
    41,  46,  67,  201, 162, 216, 124, 1,   61,  54,  84,  161, 236, 240, 6,   19,  98,  167, 5,
    243, 192, 199, 115, 140, 152, 147, 43,  217, 188, 76,  130, 202, 30,  155, 87,  60,  253, 212,
    224, 22,  103, 66,  111, 24,  138, 23,  229, 18,  190, 78,  196, 214, 218, 158, 222, 73,  160,
    251, 245, 142, 187, 47,  238, 122, 169, 104, 121, 145, 21,  178, 7,   63,  148, 194, 16,  137,
    11,  34,  95,  33,  128, 127, 93,  154, 90,  144, 50,  39,  53,  62,  204, 231, 191, 247, 151,
    3,   255, 25,  48,  179, 72,  165, 181, 209, 215, 94,  146, 42,  172, 86,  170, 198, 79,  184,
    56,  210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4,   241, 69,  157, 112, 89,  100,
    113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,   27,  96,  37,  173, 174, 176, 185, 246,
    28,  70,  97,  105, 52,  64,  126, 15,  85,  71,  163, 35,  221, 81,  175, 58,  195, 92,  249,
    206, 186, 197, 234, 38,  44,  83,  13,  110, 133, 40,  132, 9,   211, 223, 205, 244, 65,  129,
    77,  82,  106, 220, 55,  200, 108, 193, 171, 250, 36,  225, 123, 8,   12,  189, 177, 74,  120,
    136, 149, 139, 227, 99,  232, 109, 233, 203, 213, 254, 59,  0,   29,  57,  242, 239, 183, 14,
    102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,  49,  68,  80,  180, 143, 237, 31,
    26,  219, 153, 141, 51,  159, 17,  131, 20,
};

struct md2 {
  unsigned char x[48];        /* state, block, state ^ block */
  unsigned char checksum[16]; /* running checksum of the padded message */
  unsigned char last;         /* the checksum's last byte (L in RFC 1319) */
  unsigned count;             /* bytes of the current block */
};

static void md2_init(struct md2 *m) {
  memset(m, 0, sizeof *m);
}

static void md2_byte(struct md2 *m, unsigned char b) {
  m->x[16 + m->count] = b;
  m->x[32 + m->count] = (unsigned char)(m->x[m->count] ^ b);
  m->checksum[m->count] ^= pi_subst[b ^ m->last];
  m->last = m->checksum[m->count];
  if (++m->count < 16) {
    return;
  }
  m->count = 0;
  unsigned t = 0;
  for (unsigned round = 0; round < 18; round++) {
    for (unsigned k = 0; k < 48; k++) {
      m->x[k] ^= pi_subst[t];
      t = m->x[k];
    }
    t = (t + round) & 0xff;
  }
}

static void md2_update(struct md2 *m, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    md2_byte(m, b[i]);
  }
}

static void md2_final(struct md2 *m, unsigned char digest[16]) {
  unsigned pad = 16 - m->count;
  for (unsigned i = 0; i < pad; i++) {
    md2_byte(m, (unsigned char)pad);
  }
  unsigned char sum[16];
  memcpy(sum, m->checksum, sizeof sum);
  md2_update(m, sum, sizeof sum);
  memcpy(digest, m->x, 16);
}

void fk_md2(const void *data, size_t n, unsigned char digest[16]) {
  struct md2 m;
  md2_init(&m);
  md2_update(&m, data, n);
  md2_final(&m, digest);
}

/* The key of the HMAC (the output of a first pass over no input). */
static const unsigned char hmac_key[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                           0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};

static void keyed(struct md2 *m, unsigned char pad) {
  md2_init(m);
  for (size_t i = 0; i < sizeof hmac_key; i++) {
    md2_byte(m, (unsigned char)(hmac_key[i] ^ pad));
  }
}

void fk_integrity_hash(const struct fk_integrity_input *in, const struct fk_integrity_device *devs,
                       int ndev, uint64_t out[2]) {
  switch (in->version % 10) {
  case 0:
    out[0] = 0x3341181C03CB675CULL;
    out[1] = 0x8ED383AA1F4CD1E8ULL;
    return;
  case 1:
    out[0] = 0x1841181C03CB675CULL;
    out[1] = 0x8ED383AA1F4CD1E8ULL;
    return;
  default:
    break;
  }
  struct md2 m;
  unsigned char inner[16], digest[16];
  keyed(&m, 0x36);
  md2_update(&m, in, sizeof *in);
  for (int d = 0; d < ndev; d++) {
    md2_update(&m, &devs[d], sizeof devs[d]);
  }
  md2_final(&m, inner);
  keyed(&m, 0x5c);
  md2_update(&m, inner, sizeof inner);
  md2_final(&m, digest);
  memcpy(out, digest, sizeof digest);
}
