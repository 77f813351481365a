/*
 * agentbus/agentbus.h - everything a client program of the bus uses, in one
 * include: connections, producers, subscribers and CURVE key files
 * (libagentbus), and the protocol library they speak (libagentbus-proto):
 * statuses and errors, buffers, values, the wire codec, AG-UI validation and
 * lifecycle, the JSON bridge, ids, negotiation, the thread reducer, snapshots
 * and JSON Patch.
 *
 *   #include <agentbus/agentbus.h>
 *   cc app.c $(pkg-config --cflags --libs agentbus)
 *
 * Plugin authors include agentbus/plugin.h; a program that embeds a broker
 * includes agentbus/broker.h (libagentbus-broker). No agentbus header
 * includes a header of another library: msgpack-c, jansson, ZeroMQ and
 * SQLite are the libraries' own business. docs/CLIENT.md is the guide.
 */
#ifndef AGENTBUS_AGENTBUS_H
#define AGENTBUS_AGENTBUS_H

#include "agentbus/agui.h"
#include "agentbus/alloc.h"
#include "agentbus/buf.h"
#include "agentbus/client.h"
#include "agentbus/codec.h"
#include "agentbus/ids.h"
#include "agentbus/json.h"
#include "agentbus/jsonpatch.h"
#include "agentbus/keys.h"
#include "agentbus/nego.h"
#include "agentbus/producer.h"
#include "agentbus/reducer.h"
#include "agentbus/snapshot.h"
#include "agentbus/status.h"
#include "agentbus/subscriber.h"
#include "agentbus/value.h"
#include "agentbus/worker.h"

/** The version of the agentbus package these headers belong to. */
#define AB_VERSION_MAJOR 0
#define AB_VERSION_MINOR 1
#define AB_VERSION_PATCH 0

#endif /* AGENTBUS_AGENTBUS_H */
