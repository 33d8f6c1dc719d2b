/* A program built against the INSTALLED libcortiq (tests/capi/install_test.sh): loads a model,
 * generates greedily and prints the text. Usage: hello MODEL.cmf PROMPT */
#include <cortiq.h>
#include <stdio.h>
#include <string.h>

static int print_piece(const char* piece, size_t len, void* user) {
  (void)user;
  fwrite(piece, 1, len, stdout);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  cortiq_model* m = NULL;
  cortiq_context* c = NULL;
  int32_t ids[256];
  size_t n = 0;
  cortiq_sampler_params sp = cortiq_sampler_params_greedy();
  sp.max_tokens = 40;
  if (cortiq_model_open(argv[1], NULL, &m) != CORTIQ_OK || cortiq_context_new(m, &c) != CORTIQ_OK ||
      cortiq_tokenize(m, argv[2], strlen(argv[2]), CORTIQ_TOKENIZE_PROMPT, ids, 256, &n) != CORTIQ_OK ||
      cortiq_generate(c, ids, n, &sp, print_piece, NULL, NULL) != CORTIQ_OK) {
    fprintf(stderr, "error: %s\n", cortiq_last_error());
    return 1;
  }
  printf("\n");
  cortiq_context_free(c);
  cortiq_model_close(m);
  return 0;
}
