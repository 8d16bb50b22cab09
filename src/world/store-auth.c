/* The store's job token: a secret every rank of a job shares
 * (PHX_STORE_TOKEN, made by phxrun). A client proves it knows the token,
 * and the server proves it back, without sending it: each side answers
 * the other's random nonce with HMAC-SHA256(token, label | client nonce |
 * server nonce) from OpenSSL's libcrypto. What this protects and what it
 * does not: doc/store.md. */
#include "config.h"
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include "src/world/store-server.h"
#include "src/base/util.h"

phx_status px_store_token(const char *who, uint8_t *buf, size_t *len)
{
    const char *t = getenv("PHX_STORE_TOKEN");
    size_t n = t ? strlen(t) : 0;
    *len = 0;
    if (n > PX_STORE_MAX_TOKEN)
        return phx_error(PHX_EINVAL, "%s: PHX_STORE_TOKEN is %zu bytes long, at most %u allowed", who, n,
                         PX_STORE_MAX_TOKEN);
    if (n) memcpy(buf, t, n);
    *len = n;
    return PHX_OK;
}

phx_status px_store_nonce(uint8_t *out, size_t n)
{
    if (RAND_bytes(out, (int)n) != 1)
        return phx_error(PHX_EIO, "store: the system's random generator failed (OpenSSL RAND_bytes)");
    return PHX_OK;
}

int px_store_proof(const uint8_t *token, size_t tlen, const char *label, const uint8_t *cnonce, const uint8_t *snonce,
                   uint8_t out[PX_STORE_NONCE])
{
    uint8_t msg[16 + 2 * PX_STORE_NONCE];
    size_t ll = strlen(label);
    memset(msg, 0, 16);
    memcpy(msg, "PHXS ", 5);
    memcpy(msg + 5, label, ll < 11 ? ll : 11);
    memcpy(msg + 16, cnonce, PX_STORE_NONCE);
    memcpy(msg + 16 + PX_STORE_NONCE, snonce, PX_STORE_NONCE);
    unsigned int olen = PX_STORE_NONCE;
    static const uint8_t none = 0;
    if (!HMAC(EVP_sha256(), tlen ? token : &none, (int)tlen, msg, sizeof msg, out, &olen) || olen != PX_STORE_NONCE)
        return -1;
    return 0;
}

int px_store_proof_eq(const uint8_t *a, const uint8_t *b)
{
    return CRYPTO_memcmp(a, b, PX_STORE_NONCE) == 0;
}
