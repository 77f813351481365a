/*
 * embedded.h - a broker inside the test's process (include/agentbus/broker.h)
 * for the broker module's tests: a fresh temporary directory and the settings
 * every such test uses (loopback ports the system picks, process durability).
 */
#ifndef AB_TEST_EMBEDDED_H
#define AB_TEST_EMBEDDED_H

#include "testutil.h"

#include "agentbus/broker.h"

#include <stdio.h>
#include <stdlib.h>

/*
 * Make the temporary directory @p dir (@p cap bytes, from the mkdtemp
 * template @p tmpl) and start a broker on @p dir/data at @p level; fails the
 * test when it cannot.
 */
static inline ab_broker_t *tu_broker_new(char *dir, size_t cap, const char *tmpl,
                                         ab_log_level_t level)
{
    snprintf(dir, cap, "%s", tmpl);
    assert_non_null(mkdtemp(dir));
    ab_broker_config_t cfg;
    ab_broker_config_defaults(&cfg);
    snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s/data", dir);
    snprintf(cfg.cmd_endpoint, sizeof(cfg.cmd_endpoint), "tcp://127.0.0.1:*");
    snprintf(cfg.events_endpoint, sizeof(cfg.events_endpoint), "tcp://127.0.0.1:*");
    cfg.durability = AB_DURABILITY_PROCESS;
    cfg.log_level = level;
    ab_error_t err = AB_ERROR_INIT;
    ab_broker_t *b = NULL;
    if (ab_broker_new(&cfg, &b, &err) != AB_OK)
        fail_msg("broker start: %s", err.message);
    return b;
}

#endif /* AB_TEST_EMBEDDED_H */
