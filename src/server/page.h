/* server/page.h: the chat page `celer serve` answers at GET / (page.c). */
#ifndef CELER_SERVER_PAGE_H
#define CELER_SERVER_PAGE_H
#include <microhttpd.h>

#include "server/server.h"

/* Queues the page on c for GET or HEAD (405 otherwise), with a Content-Security-Policy
 * that allows only this server ('self') and the page's own inline script and style. */
enum MHD_Result srv_page_reply(srv *s, struct MHD_Connection *c, const char *method);
#endif
