/*
 * test_keys.c - CURVE key files (agentbus/keys.h): a pair written and read
 * back, never overwritten (O_EXCL, nothing left behind), the files' modes,
 * each malformed line refused with its PATH:LINE, a secret that does not
 * belong to its public key, a group- or world-readable secret file refused,
 * any bytes read safely (long lines, NUL bytes, oversized files).
 */
#include "agentbus/keys.h"
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

typedef struct tdir {
    char path[64];
} tdir_t;

static void tdir_make(tdir_t *d)
{
    snprintf(d->path, sizeof d->path, "/tmp/ab_test_keys_XXXXXX");
    assert_non_null(mkdtemp(d->path));
}

static void tdir_rm(tdir_t *d, const char *const *names)
{
    char p[128];
    for (size_t i = 0; names[i] != NULL; i++) {
        snprintf(p, sizeof p, "%s/%s", d->path, names[i]);
        unlink(p);
    }
    assert_int_equal(rmdir(d->path), 0); /* nothing else was left behind */
}

/* Write @p text (@p len bytes) as DIR/NAME with @p mode; the path goes to @p out. */
static void put(const tdir_t *d, const char *name, const char *text, size_t len, mode_t mode,
                char out[128])
{
    snprintf(out, 128, "%s/%s", d->path, name);
    unlink(out);
    int fd = open(out, O_WRONLY | O_CREAT | O_EXCL, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_mode & 07777;
}

static void need_curve(void)
{
    if (!zmq_has("curve")) {
        print_message("libzmq without CURVE: skipped\n");
        exit(77);
    }
}

static void test_new_write_read(void **state)
{
    (void)state;
    need_curve();
    tdir_t d;
    tdir_make(&d);
    ab_keypair_t kp, back, pub;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_keypair_new(&kp, &err), AB_OK);
    assert_int_equal(strlen(kp.public_key), AB_KEY_Z85_LEN);
    assert_int_equal(strlen(kp.secret_key), AB_KEY_Z85_LEN);
    assert_string_not_equal(kp.public_key, kp.secret_key);
    assert_int_equal(ab_keypair_write(&kp, d.path, "alice", &err), AB_OK);
    char sec[128], pubp[128];
    snprintf(sec, sizeof sec, "%s/alice.key_secret", d.path);
    snprintf(pubp, sizeof pubp, "%s/alice.key", d.path);
    assert_int_equal(mode_of(sec), 0600);
    assert_int_equal(mode_of(pubp) & 0600, 0600);
    assert_int_equal(mode_of(pubp) & 0133, 0); /* 0644 less the umask */
    assert_int_equal(ab_keypair_read(&back, sec, &err), AB_OK);
    assert_string_equal(back.public_key, kp.public_key);
    assert_string_equal(back.secret_key, kp.secret_key);
    assert_int_equal(ab_keypair_read(&pub, pubp, &err), AB_OK);
    assert_string_equal(pub.public_key, kp.public_key);
    assert_string_equal(pub.secret_key, "");
    /* the file holds exactly the documented lines */
    size_t len = 0;
    char *text = tu_read_file(pubp, &len);
    char want[64];
    snprintf(want, sizeof want, "public-key %s\n", kp.public_key);
    assert_string_equal(text, want);
    free(text);
    /* two pairs differ */
    ab_keypair_t other;
    assert_int_equal(ab_keypair_new(&other, &err), AB_OK);
    assert_string_not_equal(other.public_key, kp.public_key);
    tdir_rm(&d, (const char *const[]){"alice.key", "alice.key_secret", NULL});
}

static void test_fingerprint(void **state)
{
    (void)state;
    char fp[9];
    ab_key_fingerprint("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7", fp);
    assert_string_equal(fp, "rq:rM>}U");
    ab_key_fingerprint("abc", fp);
    assert_string_equal(fp, "abc");
    ab_key_fingerprint(NULL, fp);
    assert_string_equal(fp, "");
}

/* Never overwrite: either file existing is a conflict naming it, and nothing is left behind. */
static void test_no_overwrite(void **state)
{
    (void)state;
    need_curve();
    tdir_t d;
    tdir_make(&d);
    ab_keypair_t kp, kp2, back;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_keypair_new(&kp, &err), AB_OK);
    assert_int_equal(ab_keypair_new(&kp2, &err), AB_OK);
    assert_int_equal(ab_keypair_write(&kp, d.path, "bob", &err), AB_OK);
    assert_int_equal(ab_keypair_write(&kp2, d.path, "bob", &err), AB_CONFLICT);
    assert_non_null(strstr(err.message, "bob.key_secret"));
    char sec[128];
    snprintf(sec, sizeof sec, "%s/bob.key_secret", d.path);
    assert_int_equal(ab_keypair_read(&back, sec, &err), AB_OK);
    assert_string_equal(back.secret_key, kp.secret_key); /* the first pair is intact */
    /* only the public file exists: refused, and the secret file made meanwhile is removed */
    char pubp[128];
    put(&d, "carol.key", "x\n", 2, 0644, pubp);
    ab_error_clear(&err);
    assert_int_equal(ab_keypair_write(&kp2, d.path, "carol", &err), AB_CONFLICT);
    assert_non_null(strstr(err.message, "carol.key already exists"));
    snprintf(sec, sizeof sec, "%s/carol.key_secret", d.path);
    assert_int_equal(access(sec, F_OK), -1);
    tdir_rm(&d, (const char *const[]){"bob.key", "bob.key_secret", "carol.key", NULL});
}

static void test_write_refusals(void **state)
{
    (void)state;
    need_curve();
    ab_keypair_t kp, bad;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_keypair_new(&kp, &err), AB_OK);
    assert_int_equal(ab_keypair_write(&kp, "/tmp", "", &err), AB_INVALID_ARGUMENT);
    assert_string_equal(err.field, "name");
    ab_error_clear(&err);
    assert_int_equal(ab_keypair_write(&kp, "/tmp", "a/b", &err), AB_INVALID_ARGUMENT);
    assert_string_equal(err.field, "name");
    ab_error_clear(&err);
    assert_int_equal(ab_keypair_write(&kp, "/nonexistent-ab-dir", "x", &err), AB_IO);
    assert_non_null(strstr(err.message, "/nonexistent-ab-dir/x.key_secret"));
    /* a pair that does not belong together is not written */
    assert_int_equal(ab_keypair_new(&bad, &err), AB_OK);
    memcpy(bad.secret_key, kp.secret_key, sizeof bad.secret_key);
    ab_error_clear(&err);
    assert_int_equal(ab_keypair_write(&bad, "/nonexistent-ab-dir", "x", &err), AB_INVALID_ARGUMENT);
    assert_string_equal(err.field, "secret_key");
    bad = kp;
    bad.public_key[3] = ' ';
    ab_error_clear(&err);
    assert_int_equal(ab_keypair_write(&bad, "/nonexistent-ab-dir", "x", &err), AB_INVALID_ARGUMENT);
    assert_string_equal(err.field, "public_key");
}

/* Read @p text as a key file; expect "PATH:LINE: " + @p what in the message ("PATH: " for line 0).
 */
static void expect_bad(const tdir_t *d, const char *text, size_t len, int line, const char *what)
{
    char path[128], want[200];
    put(d, "bad.key", text, len, 0600, path);
    ab_keypair_t kp;
    memset(&kp, 0x5a, sizeof kp);
    ab_keypair_t orig = kp;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_keypair_read(&kp, path, &err), AB_INVALID_ARGUMENT);
    if (line > 0)
        snprintf(want, sizeof want, "%s:%d: ", path, line);
    else
        snprintf(want, sizeof want, "%s: ", path);
    if (strncmp(err.message, want, strlen(want)) != 0 || strstr(err.message, what) == NULL)
        fail_msg("expected '%s...%s' in '%s'", want, what, err.message);
    assert_memory_equal(&kp, &orig, sizeof kp); /* out-param untouched */
}

static void test_malformed_lines(void **state)
{
    (void)state;
    need_curve();
    tdir_t d;
    tdir_make(&d);
    ab_keypair_t kp;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_keypair_new(&kp, &err), AB_OK);
    char t[512];
    const char *P = kp.public_key, *S = kp.secret_key;
#define BAD(line, what, ...)                                                                       \
    do {                                                                                           \
        int n_ = snprintf(t, sizeof t, __VA_ARGS__);                                               \
        expect_bad(&d, t, (size_t)n_, line, what);                                                 \
    } while (0)
    BAD(1, "expected 'public-key KEY' or 'secret-key KEY', got 'hello'", "hello\n");
    BAD(3, "expected 'public-key KEY'", "# c\n\npublickey %s\n", P);
    BAD(2, "public-key: not a key (40 characters of Z85, got 39 bytes)", "\npublic-key %.39s\n", P);
    BAD(1, "public-key: not a key (40 characters of Z85, got 41 bytes)", "public-key %sx\n", P);
    BAD(1, "public-key: not a key", "public-key %.39s~\n", P);           /* '~' is not Z85 */
    BAD(1, "public-key: not a key", "public-key %.35s%s\n", P, "#####"); /* > 2^32: overflow */
    BAD(2, "secret-key: not a key", "public-key %s\nsecret-key %.20s\n", P, S);
    BAD(2, "a second public-key line (the first is line 1)", "public-key %s\npublic-key %s\n", P,
        P);
    BAD(3, "a second secret-key line (the first is line 2)",
        "public-key %s\nsecret-key %s\nsecret-key %s\n", P, S, S);
    BAD(1, "expected 'public-key KEY' or 'secret-key KEY', got 'public-key'", "public-key\n");
    BAD(0, "no public-key line", "# only a comment\nsecret-key %s\n", S);
    BAD(0, "no public-key line", "%s", "");
    BAD(1, "got '\?\?\?'", "\x01\xff\x7f\n");
    for (size_t i = 0; i < 300; i++) /* a long line is quoted short */
        t[i] = 'a';
    expect_bad(&d, t, 300, 1, "got 'aaaaaaaaaaaaaaaaaaaaaaaa...'");
    /* a NUL byte inside a line is refused, not taken as its end */
    int n = snprintf(t, sizeof t, "public-key %s\n# x", P);
    memcpy(t + n, "\0y\n", 3);
    expect_bad(&d, t, (size_t)n + 3, 2, "NUL byte in the line");
    /* whitespace around a line, a tab after the name and CRLF line ends are fine */
    char path[128];
    n = snprintf(t, sizeof t, "  public-key\t%s \r\n# note\r\n\r\n", P);
    put(&d, "ok.key", t, (size_t)n, 0644, path);
    ab_keypair_t back;
    assert_int_equal(ab_keypair_read(&back, path, &err), AB_OK);
    assert_string_equal(back.public_key, P);
    tdir_rm(&d, (const char *const[]){"bad.key", "ok.key", NULL});
#undef BAD
}

/* A secret whose public key is another: refused, naming both lines. */
static void test_mismatched_secret(void **state)
{
    (void)state;
    need_curve();
    tdir_t d;
    tdir_make(&d);
    ab_keypair_t a, b;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_keypair_new(&a, &err), AB_OK);
    assert_int_equal(ab_keypair_new(&b, &err), AB_OK);
    char t[256];
    int n = snprintf(t, sizeof t, "public-key %s\n# comment\nsecret-key %s\n", a.public_key,
                     b.secret_key);
    expect_bad(&d, t, (size_t)n, 3, "the secret key does not belong to the public key of line 1");
    tdir_rm(&d, (const char *const[]){"bad.key", NULL});
}

/* A secret file readable by group or others is refused, telling to chmod 600. */
static void test_secret_mode(void **state)
{
    (void)state;
    need_curve();
    tdir_t d;
    tdir_make(&d);
    ab_keypair_t kp, back;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_keypair_new(&kp, &err), AB_OK);
    char t[256], path[128], want[200];
    int n = snprintf(t, sizeof t, "public-key %s\nsecret-key %s\n", kp.public_key, kp.secret_key);
    const mode_t refused[] = {0640, 0604, 0644, 0660};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        put(&d, "s.key_secret", t, (size_t)n, refused[i], path);
        ab_error_clear(&err);
        assert_int_equal(ab_keypair_read(&back, path, &err), AB_UNAUTHORIZED);
        snprintf(want, sizeof want, "chmod 600 %s", path);
        assert_non_null(strstr(err.message, want));
        snprintf(want, sizeof want, "mode %04o", (unsigned)refused[i]);
        assert_non_null(strstr(err.message, want));
    }
    const mode_t fine[] = {0600, 0400, 0700};
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        put(&d, "s.key_secret", t, (size_t)n, fine[i], path);
        assert_int_equal(ab_keypair_read(&back, path, &err), AB_OK);
        assert_string_equal(back.secret_key, kp.secret_key);
    }
    /* a public key file may be readable by anyone */
    n = snprintf(t, sizeof t, "public-key %s\n", kp.public_key);
    put(&d, "p.key", t, (size_t)n, 0644, path);
    assert_int_equal(ab_keypair_read(&back, path, &err), AB_OK);
    tdir_rm(&d, (const char *const[]){"s.key_secret", "p.key", NULL});
}

static void test_read_files(void **state)
{
    (void)state;
    tdir_t d;
    tdir_make(&d);
    ab_keypair_t kp;
    ab_error_t err = AB_ERROR_INIT;
    char path[128];
    snprintf(path, sizeof path, "%s/missing.key", d.path);
    assert_int_equal(ab_keypair_read(&kp, path, &err), AB_NOT_FOUND);
    assert_non_null(strstr(err.message, path));
    ab_error_clear(&err);
    assert_int_equal(ab_keypair_read(&kp, d.path, &err), AB_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "not a regular file"));
    /* a file larger than any key file is refused before it is parsed */
    static char big[5000];
    memset(big, '#', sizeof big);
    put(&d, "big.key", big, sizeof big, 0644, path);
    ab_error_clear(&err);
    assert_int_equal(ab_keypair_read(&kp, path, &err), AB_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "larger than 4096 bytes"));
    tdir_rm(&d, (const char *const[]){"big.key", NULL});
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_write_read),  cmocka_unit_test(test_fingerprint),
        cmocka_unit_test(test_no_overwrite),    cmocka_unit_test(test_write_refusals),
        cmocka_unit_test(test_malformed_lines), cmocka_unit_test(test_mismatched_secret),
        cmocka_unit_test(test_secret_mode),     cmocka_unit_test(test_read_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
