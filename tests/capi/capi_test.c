/* The C API (include/cortiq.h) from C, against what the CLI answers for the same file.
 * Usage: capi_test FIXTURE_DIR (made by tests/capi/prepare.sh: s.cmf and the CLI's outputs). */
#define _POSIX_C_SOURCE 199309L /* nanosleep */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cortiq.h"

static int failures = 0;
#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              cortiq_last_error());                                                            \
      ++failures;                                                                              \
    }                                                                                          \
  } while (0)

static char* read_file(const char* dir, const char* name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(2);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* s = malloc((size_t)n + 1);
  size_t got = fread(s, 1, (size_t)n, f);
  s[got] = 0;
  fclose(f);
  return s;
}

typedef struct {
  char text[8192];
  size_t len;
  int calls;
  int cancel_after; /* return nonzero after this many pieces (0 = never) */
} sink;

static int on_text(const char* piece, size_t len, void* user) {
  sink* s = (sink*)user;
  if (s->len + len < sizeof s->text) {
    memcpy(s->text + s->len, piece, len);
    s->len += len;
    s->text[s->len] = 0;
  }
  ++s->calls;
  return s->cancel_after && s->calls >= s->cancel_after;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: capi_test FIXTURE_DIR\n");
    return 2;
  }
  const char* dir = argv[1];
  char model_path[4096];
  snprintf(model_path, sizeof model_path, "%s/s.cmf", dir);

  /* Null and closed handles: error codes, never a crash. */
  CHECK(cortiq_file_open(NULL, NULL) == CORTIQ_ERR_ARGUMENT);
  CHECK(cortiq_file_verify(NULL, NULL) == CORTIQ_ERR_HANDLE);
  CHECK(strstr(cortiq_last_error(), "NULL or closed") != NULL);
  CHECK(cortiq_model_n_vocab(NULL) == 0);
  CHECK(cortiq_context_set_task(NULL, "x") == CORTIQ_ERR_HANDLE);
  CHECK(cortiq_generate(NULL, NULL, 0, NULL, NULL, NULL, NULL) == CORTIQ_ERR_HANDLE);
  cortiq_model* bad = NULL;
  CHECK(cortiq_model_open("/nonexistent/x.cmf", NULL, &bad) == CORTIQ_ERR_IO && bad == NULL);

  /* File: open, info, verify. */
  cortiq_file* f = NULL;
  CHECK(cortiq_file_open(model_path, &f) == CORTIQ_OK);
  CHECK(cortiq_file_num_files(f) == 1);
  char* info = NULL;
  CHECK(cortiq_file_info_json(f, &info) == CORTIQ_OK);
  CHECK(info && strstr(info, "\"arch\":\"llama\"") && strstr(info, "\"vocab_size\":512") &&
        strstr(info, "\"num_layers\":5") && strstr(info, "\"has_chat_template\":true"));
  cortiq_string_free(info);
  char* problems = NULL;
  CHECK(cortiq_file_verify(f, &problems) == CORTIQ_OK && problems && problems[0] == 0);
  cortiq_string_free(problems);
  cortiq_file_close(f);
  CHECK(cortiq_file_num_files(f) == 0); /* closed: recognized */
  CHECK(cortiq_file_verify(f, NULL) == CORTIQ_ERR_HANDLE);

  /* A shard set: its first shard's name opens every file; the model runs as the single file. */
  {
    char shard[4096];
    int count = 0; /* the set's size: the first shard's name that exists */
    for (int k = 2; k < 1000 && !count; ++k) {
      snprintf(shard, sizeof shard, "%s/sh/s-00001-of-%05d.cmf", dir, k);
      FILE* probe = fopen(shard, "rb");
      if (probe) {
        fclose(probe);
        count = k;
      }
    }
    CHECK(count > 1);
    cortiq_file* sf = NULL;
    CHECK(cortiq_file_open(shard, &sf) == CORTIQ_OK && cortiq_file_num_files(sf) == (size_t)count);
    CHECK(cortiq_file_verify(sf, NULL) == CORTIQ_OK);
    cortiq_file_close(sf);
    cortiq_model* sm = NULL;
    cortiq_context* sc = NULL;
    CHECK(cortiq_model_open(shard, NULL, &sm) == CORTIQ_OK && cortiq_context_new(sm, &sc) == CORTIQ_OK);
    int32_t sp_ids[64];
    size_t sn = 0;
    CHECK(cortiq_tokenize(sm, "Once upon a time", 16, CORTIQ_TOKENIZE_PROMPT, sp_ids, 64, &sn) == CORTIQ_OK);
    cortiq_sampler_params g = cortiq_sampler_params_greedy();
    g.max_tokens = 40;
    sink out;
    memset(&out, 0, sizeof out);
    CHECK(cortiq_generate(sc, sp_ids, sn, &g, on_text, &out, NULL) == CORTIQ_OK);
    strcat(out.text, "\n");
    char* want = read_file(dir, "greedy.txt");
    CHECK(strcmp(out.text, want) == 0);
    free(want);
    cortiq_context_free(sc);
    cortiq_model_close(sm);
  }

  /* Model + context. */
  cortiq_model_params mp = cortiq_model_params_default();
  mp.threads = 1;
  cortiq_model* m = NULL;
  CHECK(cortiq_model_open(model_path, &mp, &m) == CORTIQ_OK);
  if (!m) return 1;
  const size_t n_vocab = cortiq_model_n_vocab(m);
  CHECK(n_vocab == 512);
  CHECK(cortiq_model_n_embd(m) == 64);
  cortiq_context* c = NULL;
  CHECK(cortiq_context_new(m, &c) == CORTIQ_OK);

  /* Tokenize: the ids `cortiq tokenize --ids-only` printed (add_special_tokens = true). */
  const char* text = "Once upon a time, Lily";
  int32_t ids[64];
  size_t n = 0;
  CHECK(cortiq_tokenize(m, text, strlen(text), CORTIQ_TOKENIZE_SPECIAL, ids, 64, &n) == CORTIQ_OK);
  char got[1024] = "[";
  for (size_t i = 0; i < n; ++i) {
    char num[32];
    snprintf(num, sizeof num, "%s%d", i ? ", " : "", ids[i]);
    strcat(got, num);
  }
  strcat(got, "]\n");
  char* want_ids = read_file(dir, "ids.txt");
  CHECK(strcmp(got, want_ids) == 0);
  if (strcmp(got, want_ids) != 0) fprintf(stderr, "tokenize: got %s want %s", got, want_ids);
  free(want_ids);
  size_t n_small = 0;
  CHECK(cortiq_tokenize(m, text, strlen(text), CORTIQ_TOKENIZE_SPECIAL, ids, 2, &n_small) ==
            CORTIQ_ERR_BUFFER &&
        n_small == n);
  /* Detokenize inverts the plain encoding. */
  CHECK(cortiq_tokenize(m, text, strlen(text), CORTIQ_TOKENIZE_PLAIN, ids, 64, &n) == CORTIQ_OK);
  char* back = NULL;
  size_t back_len = 0;
  CHECK(cortiq_detokenize(m, ids, n, 1, &back, &back_len) == CORTIQ_OK && back && strcmp(back, text) == 0 &&
        back_len == strlen(text));
  cortiq_string_free(back);

  /* Chat template: what `cortiq template` rendered. */
  cortiq_chat_message msgs[2] = {{"system", "Be brief."}, {"user", "Tell me a story."}};
  char* rendered = NULL;
  CHECK(cortiq_chat_render(m, msgs, 2, 0, &rendered) == CORTIQ_OK);
  char* want_chat = read_file(dir, "chat.txt");
  CHECK(rendered && strcmp(rendered, want_chat) == 0);
  free(want_chat);
  cortiq_string_free(rendered);

  /* Greedy generation equals `cortiq run --raw --greedy -n 40` (its stdout ends with a newline). */
  const char* prompt = "Once upon a time";
  int32_t p[64];
  size_t np = 0;
  CHECK(cortiq_tokenize(m, prompt, strlen(prompt), CORTIQ_TOKENIZE_PROMPT, p, 64, &np) == CORTIQ_OK);
  CHECK(np > 0 && p[0] == 1); /* BOS */
  cortiq_sampler_params sp = cortiq_sampler_params_greedy();
  sp.max_tokens = 40;
  sink s;
  memset(&s, 0, sizeof s);
  cortiq_generate_result r;
  CHECK(cortiq_generate(c, p, np, &sp, on_text, &s, &r) == CORTIQ_OK);
  char* want_run = read_file(dir, "greedy.txt");
  strcat(s.text, "\n");
  CHECK(strcmp(s.text, want_run) == 0);
  if (strcmp(s.text, want_run) != 0) fprintf(stderr, "generate: got [%s] want [%s]\n", s.text, want_run);
  free(want_run);
  CHECK(r.finish == CORTIQ_FINISH_MAX_TOKENS && r.generated_tokens == 40 && r.prompt_tokens == np);
  CHECK(s.calls > 1);

  /* Cancellation from the callback: stops after 3 pieces. */
  memset(&s, 0, sizeof s);
  s.cancel_after = 3;
  CHECK(cortiq_generate(c, p, np, &sp, on_text, &s, &r) == CORTIQ_OK);
  CHECK(r.finish == CORTIQ_FINISH_CANCELLED && s.calls == 3 && r.generated_tokens <= 40);

  /* Pull streaming gives the same text. */
  cortiq_stream* st = NULL;
  CHECK(cortiq_stream_begin(c, p, np, &sp, &st) == CORTIQ_OK);
  {
    cortiq_stream* st2 = NULL; /* one generation per context at a time */
    CHECK(cortiq_stream_begin(c, p, np, &sp, &st2) == CORTIQ_ERR_ARGUMENT && st2 == NULL);
  }
  {
    const char* piece;
    size_t len;
    char acc[8192] = "";
    while (cortiq_stream_next(st, &piece, &len) == 1) strncat(acc, piece, len);
    CHECK(cortiq_stream_free(st, &r) == CORTIQ_OK && r.finish == CORTIQ_FINISH_MAX_TOKENS);
    strcat(acc, "\n");
    char* want = read_file(dir, "greedy.txt");
    CHECK(strcmp(acc, want) == 0);
    free(want);
  }

  /* Freeing a stream the reader left early is a cancellation, also when the engine (which runs
   * ahead of the reader) has already finished: two pieces read, then time for the engine to end. */
  {
    CHECK(cortiq_stream_begin(c, p, np, &sp, &st) == CORTIQ_OK);
    const char* piece;
    size_t len;
    CHECK(cortiq_stream_next(st, &piece, &len) == 1 && cortiq_stream_next(st, &piece, &len) == 1);
    const struct timespec wait = {0, 300 * 1000 * 1000};
    nanosleep(&wait, NULL);
    CHECK(cortiq_stream_free(st, &r) == CORTIQ_OK && r.finish == CORTIQ_FINISH_CANCELLED &&
          r.generated_tokens <= 40);
  }

  /* Logits: the argmax of the prompt's last logits is greedy's first token; `all` ends in the same
   * row. */
  float* last = malloc(n_vocab * sizeof(float));
  float* all = malloc(np * n_vocab * sizeof(float));
  CHECK(cortiq_logits(c, p, np, 0, last, n_vocab) == CORTIQ_OK);
  CHECK(cortiq_logits(c, p, np, 1, all, np * n_vocab) == CORTIQ_OK);
  CHECK(cortiq_logits(c, p, np, 1, all, n_vocab) == CORTIQ_ERR_BUFFER);
  size_t best = 0;
  for (size_t i = 1; i < n_vocab; ++i)
    if (last[i] >= last[best]) best = i;
  CHECK(memcmp(last, all + (np - 1) * n_vocab, n_vocab * sizeof(float)) == 0);
  {
    sp.max_tokens = 1;
    memset(&s, 0, sizeof s);
    CHECK(cortiq_generate(c, p, np, &sp, on_text, &s, &r) == CORTIQ_OK);
    /* the first generated text is the argmax id's */
    char* piece = NULL;
    int32_t b = (int32_t)best;
    CHECK(cortiq_detokenize(m, &b, 1, 1, &piece, NULL) == CORTIQ_OK);
    CHECK(piece && strstr(s.text, piece) != NULL);
    cortiq_string_free(piece);
  }
  free(last);
  free(all);

  /* Embeddings (post-norm): causal, so the mean over the prompt of the normed states is the mean of
     each prefix's last normed state (unnormalized), and cortiq_embed is that vector at unit length. */
  const size_t d = cortiq_model_n_embd(m);
  float* mean = calloc(d, sizeof(float));
  float* acc = calloc(d, sizeof(float));
  float* e = calloc(d, sizeof(float));
  CHECK(cortiq_embed_ex(c, p, np, CORTIQ_POOL_MEAN, 0, mean, d) == CORTIQ_OK);
  for (size_t k = 1; k <= np; ++k) {
    CHECK(cortiq_embed_ex(c, p, k, CORTIQ_POOL_LAST, 0, e, d) == CORTIQ_OK);
    for (size_t i = 0; i < d; ++i) acc[i] += e[i] / (float)np;
  }
  double maxdiff = 0, norm = 0;
  for (size_t i = 0; i < d; ++i) {
    maxdiff = fmax(maxdiff, fabs(acc[i] - mean[i]));
    norm += mean[i] * mean[i];
  }
  CHECK(maxdiff < 1e-4 && norm > 1e-3);
  CHECK(cortiq_embed(c, p, np, CORTIQ_POOL_MEAN, e, d) == CORTIQ_OK);
  double unit = 0;
  maxdiff = 0;
  for (size_t i = 0; i < d; ++i) {
    unit += (double)e[i] * e[i];
    maxdiff = fmax(maxdiff, fabs(e[i] - mean[i] / sqrt(norm)));
  }
  CHECK(fabs(unit - 1.0) < 1e-5 && maxdiff < 1e-6);
  CHECK(cortiq_embed(c, p, np, CORTIQ_POOL_MEAN, e, d - 1) == CORTIQ_ERR_BUFFER);
  free(mean);
  free(acc);
  free(e);

  /* Perplexity: what `cortiq ppl --mode prefix` printed ("Final estimate: PPL = X +/- ..."). */
  char* ppl_text = read_file(dir, "ppl.txt");
  char* ppl_out = read_file(dir, "ppl.out");
  double ppl = 0, want_ppl = 0;
  size_t scored = 0;
  CHECK(cortiq_perplexity(c, ppl_text, strlen(ppl_text), &ppl, &scored) == CORTIQ_OK);
  const char* at = strstr(ppl_out, "Final estimate: PPL = ");
  CHECK(at && sscanf(at, "Final estimate: PPL = %lf", &want_ppl) == 1);
  CHECK(fabs(ppl - want_ppl) < 1e-4 && scored > 5);
  if (fabs(ppl - want_ppl) >= 1e-4) fprintf(stderr, "ppl %.6f want %.6f\n", ppl, want_ppl);
  free(ppl_text);
  free(ppl_out);

  /* Tasks and skills: this file has neither; unknown names are argument errors naming them. */
  CHECK(cortiq_context_set_task(c, "off") == CORTIQ_OK);
  CHECK(cortiq_context_set_task(c, "nosuch") == CORTIQ_ERR_ARGUMENT && strstr(cortiq_last_error(), "nosuch"));
  CHECK(cortiq_context_set_skill(c, "nosuch") == CORTIQ_ERR_ARGUMENT);
  CHECK(cortiq_context_set_skill(c, "none") == CORTIQ_OK);

  /* Bad arguments. */
  int32_t oov = (int32_t)n_vocab;
  CHECK(cortiq_generate(c, &oov, 1, NULL, NULL, NULL, NULL) == CORTIQ_ERR_ARGUMENT);
  CHECK(cortiq_generate(c, p, 0, NULL, NULL, NULL, NULL) == CORTIQ_ERR_ARGUMENT);

  /* The model may be closed first: the context keeps it alive; then both handles are closed. */
  cortiq_model_close(m);
  CHECK(cortiq_model_n_vocab(m) == 0);
  CHECK(cortiq_tokenize(m, "x", 1, CORTIQ_TOKENIZE_PLAIN, ids, 64, &n) == CORTIQ_ERR_HANDLE);
  memset(&s, 0, sizeof s);
  sp.max_tokens = 4;
  CHECK(cortiq_generate(c, p, np, &sp, on_text, &s, &r) == CORTIQ_OK && r.generated_tokens == 4);
  cortiq_context_free(c);
  CHECK(cortiq_generate(c, p, np, &sp, on_text, &s, &r) == CORTIQ_ERR_HANDLE);
  cortiq_context_free(c); /* twice: ignored */

  if (failures)
    fprintf(stderr, "%d check(s) failed\n", failures);
  else
    printf("capi_test: all checks passed\n");
  return failures ? 1 : 0;
}
