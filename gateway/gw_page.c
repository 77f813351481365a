/*
 * gw_page.c - the observer page (gateway/www/index.html), embedded in the
 * binary at build time (the bytes come from the generated gw_page_data.h).
 */
#include "gateway.h"

#include "gw_page_data.h"

const char *ab__gw_page(size_t *len)
{
    *len = sizeof(ab__gw_page_bytes);
    return (const char *)ab__gw_page_bytes;
}
