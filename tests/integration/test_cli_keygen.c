/*
 * test_cli_keygen.c - `agentbus keygen` as a process: the two files it
 * writes (read back with ab_keypair_read, modes 0600 and 0644 less the
 * umask), what it prints in text and JSON (paths, public key, fingerprint,
 * never the secret), the default directory, and its failures: an existing
 * file (exit 1, the first pair intact), a directory that cannot hold files
 * (exit 1, nothing written), usage errors (exit 2).
 */
#include "agentbus/keys.h"
#include "testutil.h"

#include "cli_run.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

static int setup(void **state)
{
    (void)state;
    if (!zmq_has("curve")) {
        print_message("libzmq without CURVE: skipped\n");
        exit(77);
    }
    return 0;
}

static void mkdir_tmp(char *dir, size_t size)
{
    snprintf(dir, size, "/tmp/ab_it_keygen_XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void rm_pair(const char *dir, const char *name)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s.key", dir, name);
    unlink(p);
    snprintf(p, sizeof p, "%s/%s.key_secret", dir, name);
    unlink(p);
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_mode & 07777;
}

static void test_keygen_writes_pair(void **state)
{
    (void)state;
    char dir[64], out[OUT_MAX], pub[128], sec[128], want[256], fp[9];
    mkdir_tmp(dir, sizeof dir);
    int rc = it_run_cli(out, "keygen alice --dir %s", dir);
    assert_int_equal(rc, 0);
    snprintf(pub, sizeof pub, "%s/alice.key", dir);
    snprintf(sec, sizeof sec, "%s/alice.key_secret", dir);
    assert_int_equal(mode_of(sec), 0600);
    assert_int_equal(mode_of(pub) & 0133, 0);
    ab_keypair_t kp, pk;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_keypair_read(&kp, sec, &err), AB_OK);
    assert_int_equal(ab_keypair_read(&pk, pub, &err), AB_OK);
    assert_string_equal(kp.public_key, pk.public_key);
    snprintf(want, sizeof want, "wrote %s (the public key)\n", pub);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof want, "wrote %s (the secret key, mode 0600", sec);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof want, "public-key %s\n", kp.public_key);
    assert_non_null(strstr(out, want));
    ab_key_fingerprint(kp.public_key, fp);
    snprintf(want, sizeof want, "fingerprint %s\n", fp);
    assert_non_null(strstr(out, want));
    assert_null(strstr(out, kp.secret_key)); /* never printed */

    /* a second keygen of the same name fails and leaves the first pair as it was */
    rc = it_run_cli(out, "keygen alice --dir %s --json", dir);
    assert_int_equal(rc, 1);
    snprintf(want, sizeof want, "%s already exists", sec);
    assert_non_null(strstr(out, want));
    ab_keypair_t again;
    assert_int_equal(ab_keypair_read(&again, sec, &err), AB_OK);
    assert_string_equal(again.secret_key, kp.secret_key);
    rm_pair(dir, "alice");
    assert_int_equal(rmdir(dir), 0);
}

static void test_keygen_json_and_default_dir(void **state)
{
    (void)state;
    char dir[64], out[OUT_MAX], want[200], cwd[1024], fp[9];
    mkdir_tmp(dir, sizeof dir);
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    int rc = it_run_cli(out, "keygen svc --json");
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(rc, 0);
    char sec[128];
    snprintf(sec, sizeof sec, "%s/svc.key_secret", dir);
    ab_keypair_t kp;
    ab_error_t err = AB_ERROR_INIT;
    assert_int_equal(ab_keypair_read(&kp, sec, &err), AB_OK);
    ab_key_fingerprint(kp.public_key, fp);
    ab_buf_t q = AB_BUF_INIT;
    assert_int_equal(ab_json_quote(&q, kp.public_key, AB_KEY_Z85_LEN), AB_OK);
    snprintf(want, sizeof want,
             "{\"name\":\"svc\",\"public_file\":\"./svc.key\",\"secret_file\":\"./svc.key_secret\","
             "\"public_key\":%.*s,",
             (int)q.len, (const char *)q.data);
    ab_buf_free(&q);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "\"fingerprint\":"));
    assert_null(strstr(out, kp.secret_key));
    rm_pair(dir, "svc");
    assert_int_equal(rmdir(dir), 0);
}

static void test_keygen_failures(void **state)
{
    (void)state;
    char dir[64], out[OUT_MAX], file[128];
    mkdir_tmp(dir, sizeof dir);
    /* a "directory" that is a file cannot hold keys (refused even for root) */
    snprintf(file, sizeof file, "%s/plain", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    int rc = it_run_cli(out, "keygen x --dir %s", file);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "cannot create"));
    assert_non_null(strstr(out, "x.key_secret"));
    rc = it_run_cli(out, "keygen x --dir %s/missing", dir);
    assert_int_equal(rc, 1);
    /* usage errors */
    assert_int_equal(it_run_cli(out, "keygen"), 2);
    assert_non_null(strstr(out, "no key name"));
    assert_int_equal(it_run_cli(out, "keygen a/b --dir %s", dir), 2);
    assert_int_equal(it_run_cli(out, "keygen a b"), 2);
    assert_int_equal(it_run_cli(out, "keygen a --bogus"), 2);
    assert_int_equal(it_run_cli(out, "keygen --help"), 0);
    assert_non_null(strstr(out, "usage: agentbus keygen NAME"));
    unlink(file);
    assert_int_equal(rmdir(dir), 0); /* nothing was written */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keygen_writes_pair),
        cmocka_unit_test(test_keygen_json_and_default_dir),
        cmocka_unit_test(test_keygen_failures),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
