/* webui.h — the web chat page that `brisk serve` answers GET / with.
 * The source is src/server/webui/index.html (one self-contained file: no
 * network resources); the build embeds it with tools/embed.sh into
 * $(BUILD)/gen/webui.c. Read-only, static storage: nothing to free.
 */
#ifndef BK_SERVER_WEBUI_H
#define BK_SERVER_WEBUI_H
#include <stddef.h>

extern const unsigned char webui_index_html[]; /* (webui_index_html_len + 1) bytes, NUL-terminated */
extern const size_t webui_index_html_len;
extern const char webui_index_html_etag[];     /* "\"CRC-SIZE\"", quotes included */
#endif
