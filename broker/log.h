/*
 * log.h - the broker's log (broker/ only): one line per message on stderr,
 * "<ISO 8601 UTC time> <level> <message>" or, with --log-format json, one
 * object {"time","level","msg"}, at the level of the thread that writes it.
 *
 * The level and format are per thread, not per process: every broker thread sets its own
 * from its broker's configuration when it starts (ab__thread_start()), so two
 * brokers with different levels can run in one process and the libraries
 * keep no process-wide setting.
 */
#ifndef AB_BROKER_LOG_H
#define AB_BROKER_LOG_H

#include "agentbus/broker.h"

/** Parse a level name ("error", "warn", "info", "debug"). */
AB_NODISCARD ab_status_t ab__log_level_from(const char *s, ab_log_level_t *out);

/**
 * Set the calling thread's log level (a thread that never sets one logs at
 * info). @return the level it had.
 */
ab_log_level_t ab__log_set_level(ab_log_level_t level);

/**
 * Start a broker thread: name it (seen in `top -H`, `ps -L`, perf; Linux
 * only, else the name is not set) and set its log level.
 */
void ab__thread_start(const char *name, ab_log_level_t level, bool json);

/** Set the calling thread's log format (true: JSON lines). @return the one it had. */
bool ab__log_set_json(bool json);

/** Write "<ISO time> <level> message" to stderr (one write per line). */
void ab__log(ab_log_level_t level, const char *fmt, ...) AB_PRINTF(2, 3);

#endif /* AB_BROKER_LOG_H */
