/* props.c — the server's self-description endpoints of http.h: /v1/models (and one model),
 * /props and /slots, in llama-server's shapes with the fields brisk has. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/http.h"

static cJSON *model_obj(const char *id) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "brisk");
    return m;
}

static char *print(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

char *props_models_json(server *srv, const char *id) {
    if (id) { /* any name the server answers to: the id, the file name, an alias */
        bool known = !strcmp(id, srv->model_id);
        for (int i = 0; !known && i < srv->n_names; i++) known = !strcmp(id, srv->names[i]);
        return known ? print(model_obj(id)) : NULL;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_obj(srv->model_id));
    return print(o);
}

/* llama-server's speculative.* parameters: the server's (n_max -1) or a request's. */
static void add_spec_params(cJSON *p, const sched_spec *sp, int n_max, int n_min) {
    cJSON_AddNumberToObject(p, "speculative.n_max", n_max < 0 ? sp->n_max : n_max);
    cJSON_AddNumberToObject(p, "speculative.n_min", n_max < 0 ? sp->n_min : n_min);
    cJSON_AddNumberToObject(p, "speculative.p_min", sp->p_min);
    cJSON_AddStringToObject(p, "speculative.types", sp->drafters ? sp->type : "none");
}

static const char *token_text(const brisk_model *m, brisk_token t, char *buf, size_t cap) {
    size_t len = 0;
    if (t < 0 || brisk_token_to_piece(m, t, true, buf, cap - 1, &len) != BRISK_OK) len = 0;
    buf[len] = 0;
    return buf;
}

char *props_json(server *srv) {
    const brisk_model *m = srv->oai.model;
    brisk_sampler_params sp = brisk_sampler_default_params();
    cJSON *o = cJSON_CreateObject(), *dg = cJSON_AddObjectToObject(o, "default_generation_settings");
    const sched_spec *spec = sched_get_spec(srv->sch);
    cJSON_AddNumberToObject(dg, "n_ctx", srv->cfg.n_ctx_slot);
    cJSON_AddBoolToObject(dg, "speculative", spec->drafters != NULL);
    cJSON *p = cJSON_AddObjectToObject(dg, "params"); /* what a request gets without sampling fields */
    cJSON_AddNumberToObject(p, "temperature", sp.temp);
    cJSON_AddNumberToObject(p, "top_k", sp.top_k);
    cJSON_AddNumberToObject(p, "top_p", sp.top_p);
    cJSON_AddNumberToObject(p, "min_p", sp.min_p);
    cJSON_AddNumberToObject(p, "repeat_penalty", sp.repeat_penalty);
    cJSON_AddNumberToObject(p, "repeat_last_n", sp.repeat_last_n);
    cJSON_AddNumberToObject(p, "presence_penalty", sp.presence_penalty);
    cJSON_AddNumberToObject(p, "frequency_penalty", sp.frequency_penalty);
    add_spec_params(p, spec, -1, 0);
    cJSON_AddNumberToObject(o, "total_slots", srv->cfg.n_parallel);
    cJSON_AddStringToObject(o, "model_alias", srv->model_id);
    cJSON *mod = cJSON_AddObjectToObject(o, "modalities");
    cJSON_AddBoolToObject(mod, "vision", false);
    cJSON_AddBoolToObject(mod, "audio", false);
    cJSON_AddBoolToObject(o, "endpoint_slots", true);
    cJSON_AddBoolToObject(o, "endpoint_props", true);
    cJSON_AddBoolToObject(o, "endpoint_metrics", true);
    cJSON_AddStringToObject(o, "chat_template", srv->chat_template ? srv->chat_template : "");
    char buf[256];
    cJSON_AddStringToObject(o, "bos_token", token_text(m, brisk_token_bos(m), buf, sizeof buf));
    cJSON_AddStringToObject(o, "eos_token", token_text(m, brisk_token_eos(m), buf, sizeof buf));
    cJSON_AddStringToObject(o, "build_info", "brisk");
    /* brisk's own: what the server computes */
    cJSON_AddBoolToObject(o, "embeddings", sched_embeddings(srv->sch));
    if (sched_embeddings(srv->sch)) cJSON_AddStringToObject(o, "pooling", brisk_pooling_name(sched_pooling(srv->sch)));
    return print(o);
}

char *props_slots_json(server *srv) {
    int n = srv->cfg.n_parallel;
    sched_slot_info *info = malloc((size_t)n * sizeof *info);
    if (!info) return NULL;
    sched_get_slots(srv->sch, info);
    const sched_spec *spec = sched_get_spec(srv->sch);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddItemToArray(a, s);
        cJSON_AddNumberToObject(s, "id", info[i].id);
        cJSON_AddNumberToObject(s, "n_ctx", srv->cfg.n_ctx_slot);
        cJSON_AddBoolToObject(s, "speculative", spec->drafters != NULL);
        cJSON_AddBoolToObject(s, "is_processing", info[i].is_processing);
        cJSON_AddNumberToObject(s, "n_cache_tokens", info[i].n_cache); /* brisk's: the KV it keeps for reuse */
        if (!info[i].is_processing) continue;
        cJSON_AddNumberToObject(s, "n_prompt_tokens", info[i].n_prompt);
        cJSON_AddNumberToObject(s, "n_prompt_tokens_cache", info[i].n_cached);
        if (spec->drafters) { /* its request's speculation, and brisk's counts of it */
            add_spec_params(cJSON_AddObjectToObject(s, "params"), spec, info[i].spec_n_max, info[i].spec_n_min);
            cJSON_AddNumberToObject(s, "draft_n", (double)info[i].n_drafted);
            cJSON_AddNumberToObject(s, "draft_n_accepted", (double)info[i].n_draft_accepted);
        }
        cJSON *nt = cJSON_CreateObject();
        cJSON_AddItemToArray(cJSON_AddArrayToObject(s, "next_token"), nt);
        cJSON_AddBoolToObject(nt, "has_next_token", info[i].n_remain > 0);
        cJSON_AddNumberToObject(nt, "n_remain", info[i].n_remain);
        cJSON_AddNumberToObject(nt, "n_decoded", info[i].n_decoded);
    }
    free(info);
    return print(a);
}
