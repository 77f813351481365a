/*
 * test_zap.c - the ZAP handler fails closed (broker/zap.c invariant 1): when
 * its socket cannot be bound (here: another handler already holds the ZAP
 * endpoint of the context) ab__zap_start() answers AB_INTERNAL and starts
 * nothing, so the broker refuses to start rather than letting libzmq accept
 * every key; a keys directory without the broker's pair is invalid_config.
 */
#include "agentbus/keys.h"
#include "zap.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <zmq.h>

static void test_second_handler_fails_closed(void **state)
{
    (void)state;
    char dir[] = "/tmp/ab-zap-XXXXXX";
    assert_non_null(mkdtemp(dir));
    ab_error_t err = AB_ERROR_INIT;
    ab_keypair_t kp, server;
    assert_int_equal(ab_keypair_new(&kp, &err), AB_OK);
    assert_int_equal(ab_keypair_write(&kp, dir, "broker", &err), AB_OK);
    void *ctx = zmq_ctx_new();
    ab__access_box_t box;
    ab__access_box_init(&box);
    ab__zap_t *one = NULL, *two = NULL;
    assert_int_equal(ab__zap_start(&one, ctx, dir, &server, &box, &err), AB_OK);
    assert_string_equal(server.public_key, kp.public_key);
    ab_error_clear(&err);
    assert_int_equal(ab__zap_start(&two, ctx, dir, &server, &box, &err), AB_INTERNAL);
    assert_null(two);
    assert_non_null(strstr(err.message, "cannot start the ZAP handler"));
    ab__zap_stop(&one);
    zmq_ctx_term(ctx); /* (libzmq releases an inproc endpoint asynchronously: a new context) */
    ctx = zmq_ctx_new();
    /* no broker key pair: refused, naming how to make it */
    char path[64];
    snprintf(path, sizeof path, "%s/broker.key_secret", dir);
    assert_int_equal(unlink(path), 0);
    ab_error_clear(&err);
    assert_int_equal(ab__zap_start(&two, ctx, dir, &server, &box, &err), AB_INVALID_CONFIG);
    assert_non_null(strstr(err.message, "agentbus keygen broker"));
    assert_null(two);
    zmq_ctx_term(ctx);
    ab__access_box_free(&box);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_handler_fails_closed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
