/*
 * keys.c - CURVE key pairs and their files (agentbus/keys.h): making a pair
 * with libzmq, writing NAME.key and NAME.key_secret, reading either back.
 *
 * Invariants:
 *  1. A key is accepted only as exactly 40 characters of the Z85 alphabet
 *     that decode to 32 bytes and encode back to the same text (so every
 *     accepted key has one spelling).
 *  2. Writing never replaces a file: both are created with O_EXCL, and when
 *     the second cannot be made the first (which this call created) is
 *     removed again, so a failed write leaves nothing behind.
 *  3. A key file is read whole, at most FILE_MAX bytes, from one descriptor
 *     (its mode is checked on that descriptor, not on the path again); any
 *     bytes are safe: lines are scanned in place, never copied unbounded,
 *     and what an error quotes is cut short and printable.
 *  4. The secret key never outlives a call in this file's buffers: they are
 *     wiped before they go out of scope.
 *  5. Out-params are written only on AB_OK.
 */
#include "agentbus/keys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define FILE_MAX  4096 /* a key file is two lines; larger is refused */
#define QUOTE_MAX 24   /* characters of a bad line an error quotes */

static const char Z85_ALPHABET[] = "0123456789abcdefghijklmnopqrstuvwxyz"
                                   "ABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

static void wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n-- > 0)
        *v++ = 0;
}

/* Invariant 1: @p s[0..n) is a key in its one Z85 spelling. */
static bool key_ok(const char *s, size_t n)
{
    if (n != AB_KEY_Z85_LEN)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\0' || strchr(Z85_ALPHABET, s[i]) == NULL)
            return false;
    char text[AB_KEY_Z85_SIZE], again[AB_KEY_Z85_SIZE];
    uint8_t raw[32];
    memcpy(text, s, n);
    text[n] = '\0';
    bool ok = zmq_z85_decode(raw, text) != NULL && zmq_z85_encode(again, raw, sizeof raw) != NULL &&
              memcmp(again, text, AB_KEY_Z85_SIZE) == 0;
    wipe(raw, sizeof raw);
    wipe(text, sizeof text);
    wipe(again, sizeof again);
    return ok;
}

static bool have_curve(void)
{
    return zmq_has("curve") != 0;
}

ab_status_t ab_keypair_new(ab_keypair_t *out, ab_error_t *err)
{
    if (!have_curve())
        return ab_error_set(err, AB_UNSUPPORTED, "",
                            "this libzmq was built without CURVE: cannot make keys");
    ab_keypair_t kp;
    if (zmq_curve_keypair(kp.public_key, kp.secret_key) != 0) {
        wipe(&kp, sizeof kp);
        return ab_error_set(err, AB_INTERNAL, "", "zmq_curve_keypair failed: %s",
                            zmq_strerror(zmq_errno()));
    }
    *out = kp;
    wipe(&kp, sizeof kp);
    return AB_OK;
}

void ab_key_fingerprint(const char *z85, char out[9])
{
    size_t n = 0;
    while (z85 != NULL && n < 8 && z85[n] != '\0') {
        out[n] = z85[n];
        n++;
    }
    out[n] = '\0';
}

/* ---- writing ------------------------------------------------------------- */

/* Create @p path with O_EXCL and @p mode and write @p text to it (invariant 2). */
static ab_status_t create_file(const char *path, mode_t mode, const char *text, ab_error_t *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0 && errno == EEXIST)
        return ab_error_set(err, AB_CONFLICT, "", "%s already exists: it is never overwritten",
                            path);
    if (fd < 0)
        return ab_error_set(err, AB_IO, "", "cannot create %s: %s", path, strerror(errno));
    size_t len = strlen(text), done = 0;
    int e = 0;
    while (done < len && e == 0) {
        ssize_t n = write(fd, text + done, len - done);
        if (n > 0)
            done += (size_t)n;
        else if (n < 0 && errno != EINTR)
            e = errno;
    }
    if (e == 0 && fsync(fd) != 0)
        e = errno;
    if (close(fd) != 0 && e == 0)
        e = errno;
    if (e == 0)
        return AB_OK;
    unlink(path);
    return ab_error_set(err, AB_IO, "", "cannot write %s: %s", path, strerror(e));
}

static ab_status_t check_pair(const ab_keypair_t *kp, ab_error_t *err)
{
    if (!key_ok(kp->public_key, strnlen(kp->public_key, AB_KEY_Z85_SIZE)))
        return ab_error_set(err, AB_INVALID_ARGUMENT, "public_key",
                            "the public key is not 40 characters of Z85");
    if (!key_ok(kp->secret_key, strnlen(kp->secret_key, AB_KEY_Z85_SIZE)))
        return ab_error_set(err, AB_INVALID_ARGUMENT, "secret_key",
                            "the secret key is not 40 characters of Z85");
    if (!have_curve())
        return AB_OK; /* cannot derive; the reader checks where CURVE is */
    char derived[AB_KEY_Z85_SIZE];
    bool same = zmq_curve_public(derived, kp->secret_key) == 0 &&
                memcmp(derived, kp->public_key, AB_KEY_Z85_SIZE) == 0;
    if (!same)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "secret_key",
                            "the secret key does not belong to the public key");
    return AB_OK;
}

ab_status_t ab_keypair_write(const ab_keypair_t *kp, const char *dir, const char *name,
                             ab_error_t *err)
{
    if (name == NULL || name[0] == '\0' || strchr(name, '/') != NULL)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "name",
                            "a key name must be non-empty and without '/'");
    ab_status_t st = check_pair(kp, err);
    if (st != AB_OK)
        return st;
    if (dir == NULL || dir[0] == '\0')
        dir = ".";
    char pub[PATH_MAX], sec[PATH_MAX], text[2 * (AB_KEY_Z85_LEN + 16)];
    int np = snprintf(pub, sizeof pub, "%s/%s.key", dir, name);
    int ns = snprintf(sec, sizeof sec, "%s/%s.key_secret", dir, name);
    if (np < 0 || ns < 0 || (size_t)ns >= sizeof sec)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "name", "%s/%s.key_secret: path too long",
                            dir, name);
    snprintf(text, sizeof text, "public-key %s\nsecret-key %s\n", kp->public_key, kp->secret_key);
    st = create_file(sec, 0600, text, err);
    wipe(text, sizeof text);
    if (st != AB_OK)
        return st;
    snprintf(text, sizeof text, "public-key %s\n", kp->public_key);
    st = create_file(pub, 0644, text, err);
    if (st != AB_OK)
        unlink(sec); /* invariant 2: ours, made just above */
    return st;
}

/* ---- reading ------------------------------------------------------------- */

typedef struct key_parse {
    const char *path;
    ab_keypair_t kp;
    unsigned pub_line, sec_line; /* 0 = not seen */
} key_parse_t;

/* Up to QUOTE_MAX bytes of @p s[0..n) for an error message, printable ASCII only. */
static void quote(char out[QUOTE_MAX + 4], const char *s, size_t n)
{
    size_t k = 0;
    for (; k < n && k < QUOTE_MAX; k++)
        out[k] = s[k] >= 0x20 && s[k] < 0x7f ? s[k] : '?';
    if (n > QUOTE_MAX)
        memcpy(out + k, "...", 3), k += 3;
    out[k] = '\0';
}

static bool blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* One line s[0..n) (without its '\n') of the file, number @p lineno. */
static ab_status_t parse_line(key_parse_t *p, unsigned lineno, const char *s, size_t n,
                              ab_error_t *err)
{
    while (n > 0 && blank(s[0]))
        s++, n--;
    while (n > 0 && blank(s[n - 1]))
        n--;
    if (n == 0 || s[0] == '#')
        return AB_OK;
    bool sep = n > 10 && blank(s[10]);
    bool is_pub = sep && memcmp(s, "public-key", 10) == 0;
    bool is_sec = sep && memcmp(s, "secret-key", 10) == 0;
    char q[QUOTE_MAX + 4];
    if (!is_pub && !is_sec) {
        quote(q, s, n);
        return ab_error_set(err, AB_INVALID_ARGUMENT, "",
                            "%s:%u: expected 'public-key KEY' or "
                            "'secret-key KEY', got '%s'",
                            p->path, lineno, q);
    }
    const char *what = is_pub ? "public-key" : "secret-key";
    unsigned *seen = is_pub ? &p->pub_line : &p->sec_line;
    if (*seen != 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "",
                            "%s:%u: a second %s line (the first is line %u)", p->path, lineno, what,
                            *seen);
    s += 10, n -= 10;
    while (n > 0 && blank(s[0]))
        s++, n--;
    if (!key_ok(s, n))
        return ab_error_set(err, AB_INVALID_ARGUMENT, "",
                            "%s:%u: %s: not a key (40 characters of Z85, got %zu bytes)", p->path,
                            lineno, what, n);
    char *dst = is_pub ? p->kp.public_key : p->kp.secret_key;
    memcpy(dst, s, AB_KEY_Z85_LEN);
    dst[AB_KEY_Z85_LEN] = '\0';
    *seen = lineno;
    return AB_OK;
}

static ab_status_t parse_text(key_parse_t *p, const char *text, size_t len, ab_error_t *err)
{
    unsigned lineno = 0;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl != NULL ? (size_t)(nl - (text + at)) : len - at;
        lineno++; /* at most FILE_MAX lines: no overflow */
        if (memchr(text + at, '\0', n) != NULL)
            return ab_error_set(err, AB_INVALID_ARGUMENT, "", "%s:%u: NUL byte in the line",
                                p->path, lineno);
        ab_status_t st = parse_line(p, lineno, text + at, n, err);
        if (st != AB_OK)
            return st;
        at += n + 1;
    }
    if (p->pub_line == 0)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "", "%s: no public-key line", p->path);
    return AB_OK;
}

/* A secret file: its mode (on @p st) and the pair it holds. */
static ab_status_t check_secret(const key_parse_t *p, const struct stat *st, ab_error_t *err)
{
    if ((st->st_mode & (S_IRGRP | S_IROTH)) != 0)
        return ab_error_set(err, AB_UNAUTHORIZED, "",
                            "%s: a secret key readable by group or others (mode %04o): "
                            "run chmod 600 %s",
                            p->path, (unsigned)(st->st_mode & 07777), p->path);
    if (!have_curve())
        return ab_error_set(err, AB_UNSUPPORTED, "",
                            "%s: this libzmq was built without CURVE: cannot check a secret key",
                            p->path);
    char derived[AB_KEY_Z85_SIZE];
    bool same = zmq_curve_public(derived, p->kp.secret_key) == 0 &&
                memcmp(derived, p->kp.public_key, AB_KEY_Z85_SIZE) == 0;
    if (!same)
        return ab_error_set(err, AB_INVALID_ARGUMENT, "",
                            "%s:%u: the secret key does not belong to the public key of line %u",
                            p->path, p->sec_line, p->pub_line);
    return AB_OK;
}

/* Read all of @p fd (at most FILE_MAX bytes) into @p buf (FILE_MAX + 1 bytes). */
static ab_status_t read_all(int fd, const char *path, char *buf, size_t *len, ab_error_t *err)
{
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, FILE_MAX + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return ab_error_set(err, AB_IO, "", "cannot read %s: %s", path, strerror(errno));
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > FILE_MAX)
            return ab_error_set(err, AB_INVALID_ARGUMENT, "",
                                "%s: larger than %d bytes: not a key file", path, FILE_MAX);
    }
    *len = n;
    return AB_OK;
}

static ab_status_t open_key(const char *path, int *fd, struct stat *st, ab_error_t *err)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0 && errno == ENOENT)
        return ab_error_set(err, AB_NOT_FOUND, "", "no key file %s", path);
    if (*fd < 0)
        return ab_error_set(err, AB_IO, "", "cannot open %s: %s", path, strerror(errno));
    if (fstat(*fd, st) != 0 || !S_ISREG(st->st_mode)) {
        close(*fd);
        return ab_error_set(err, AB_INVALID_ARGUMENT, "", "%s: not a regular file", path);
    }
    return AB_OK;
}

ab_status_t ab_keypair_read(ab_keypair_t *out, const char *path, ab_error_t *err)
{
    if (path == NULL || path[0] == '\0')
        return ab_error_set(err, AB_INVALID_ARGUMENT, "path", "no key file named");
    int fd = -1;
    struct stat st;
    ab_status_t rc = open_key(path, &fd, &st, err);
    if (rc != AB_OK)
        return rc;
    char buf[FILE_MAX + 1];
    size_t len = 0;
    key_parse_t p = {.path = path};
    rc = read_all(fd, path, buf, &len, err);
    close(fd);
    if (rc == AB_OK)
        rc = parse_text(&p, buf, len, err);
    if (rc == AB_OK && p.sec_line != 0)
        rc = check_secret(&p, &st, err);
    if (rc == AB_OK)
        *out = p.kp;
    wipe(buf, sizeof buf);
    wipe(&p.kp, sizeof p.kp);
    return rc;
}
