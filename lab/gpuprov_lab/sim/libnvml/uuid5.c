/* uuid5 (see uuid5.h) with its own SHA-1 (FIPS 180-4), so the library needs nothing beyond libc.
 * The simulated MIG devices' UUIDs are uuid5 values; the Python simulator derives the same ones.
 */
#include "uuid5.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct sha1 {
    uint32_t h[5];
    uint64_t length;
    unsigned char block[64];
    size_t used;
};

static uint32_t rol(uint32_t x, int n) { return x << n | x >> (32 - n); }

static void sha1_block(struct sha1 *s, const unsigned char *b)
{
    uint32_t w[80], a = s->h[0], bb = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)b[4 * i] << 24 | (uint32_t)b[4 * i + 1] << 16 |
               (uint32_t)b[4 * i + 2] << 8 | b[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) {
            f = (bb & c) | (~bb & d);
            k = 0x5A827999;
        } else if (i < 40) {
            f = bb ^ c ^ d;
            k = 0x6ED9EBA1;
        } else if (i < 60) {
            f = (bb & c) | (bb & d) | (c & d);
            k = 0x8F1BBCDC;
        } else {
            f = bb ^ c ^ d;
            k = 0xCA62C1D6;
        }
        uint32_t t = rol(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol(bb, 30);
        bb = a;
        a = t;
    }
    s->h[0] += a;
    s->h[1] += bb;
    s->h[2] += c;
    s->h[3] += d;
    s->h[4] += e;
}

static void sha1_update(struct sha1 *s, const unsigned char *data, size_t n)
{
    s->length += n;
    while (n--) {
        s->block[s->used++] = *data++;
        if (s->used == 64) {
            sha1_block(s, s->block);
            s->used = 0;
        }
    }
}

static void sha1_final(struct sha1 *s, unsigned char digest[20])
{
    uint64_t bits = s->length * 8;
    unsigned char pad = 0x80, zero = 0, size[8];
    sha1_update(s, &pad, 1);
    while (s->used != 56)
        sha1_update(s, &zero, 1);
    for (int i = 0; i < 8; i++)
        size[i] = (unsigned char)(bits >> (56 - 8 * i));
    sha1_update(s, size, 8);
    for (int i = 0; i < 20; i++)
        digest[i] = (unsigned char)(s->h[i / 4] >> (24 - 8 * (i % 4)));
}

void uuid5(const unsigned char namespace_id[16], const char *name, char text[37])
{
    struct sha1 s = {{0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0}, 0, {0}, 0};
    unsigned char digest[20];
    sha1_update(&s, namespace_id, 16);
    sha1_update(&s, (const unsigned char *)name, strlen(name));
    sha1_final(&s, digest);
    digest[6] = (unsigned char)((digest[6] & 0x0F) | 0x50);
    digest[8] = (unsigned char)((digest[8] & 0x3F) | 0x80);
    char *out = text;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *out++ = '-';
        out += sprintf(out, "%02x", digest[i]);
    }
}
