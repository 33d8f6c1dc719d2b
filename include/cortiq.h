/* cortiq.h — the C API of the Cortiq runtime (libcortiq).
 *
 * A thin, stable C layer over the C++ library: open and verify CMF files, load a model, and run it
 * through contexts (tokenize, chat templates, generation with streaming, logits, embeddings,
 * perplexity, task masks and skills).
 *
 * Handles. Every object is an opaque pointer made by a *_open / *_new call and released by the
 * matching *_free / *_close call. Every function checks its handle first: a NULL handle, or one
 * already freed, returns CORTIQ_ERR_HANDLE (or NULL / 0 for the few functions that return a
 * value) and never crashes. (A freed handle is recognized as long as its address was not handed
 * out again; do not rely on it beyond catching mistakes.)
 *
 * Errors. Functions returning cortiq_status return CORTIQ_OK (0) or a negative error code; the
 * message of the last failing call made ON THIS THREAD is cortiq_last_error() (thread-local, valid
 * until the next failing call on the same thread). A successful call does not clear it.
 *
 * Strings are UTF-8, passed as (pointer, length) where a length is given. Strings the library
 * returns through `char**` are allocated by it and freed with cortiq_string_free().
 *
 * Thread safety.
 *  - cortiq_file: immutable after open; any thread, concurrently.
 *  - cortiq_model: may be shared by any number of threads and contexts. Its calls (tokenize,
 *    detokenize, chat render, info) are thread-safe. The model owns one generation engine with
 *    `n_parallel` slots: generations of different contexts run concurrently and are batched
 *    together (continuous batching); more than n_parallel wait for a free slot.
 *  - cortiq_context: one thread at a time (no two calls on one context at once; a stream belongs
 *    to its context). Different contexts may be used from different threads concurrently.
 *  - A model may be freed while its contexts live: they keep it alive until the last is freed.
 *  - Streaming callbacks run on the calling thread, inside cortiq_generate.
 *
 * Versioning: CORTIQ_API_VERSION grows when functions are added; existing signatures and struct
 * layouts do not change within a major version (sizes are checked through `struct_size` fields).
 */
#ifndef CORTIQ_H
#define CORTIQ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CORTIQ_API __attribute__((visibility("default")))
#else
#define CORTIQ_API
#endif

#define CORTIQ_API_VERSION 2

/** Status codes (0 = success, negative = failure). */
typedef enum cortiq_status {
  CORTIQ_OK = 0,
  CORTIQ_ERR_HANDLE = -1,      /**< NULL or closed handle */
  CORTIQ_ERR_ARGUMENT = -2,    /**< invalid argument (NULL pointer, unknown task/skill, prompt too long…) */
  CORTIQ_ERR_IO = -3,          /**< file cannot be read / written */
  CORTIQ_ERR_FORMAT = -4,      /**< not a valid CMF file (magic, version, bounds, parse) */
  CORTIQ_ERR_INTEGRITY = -5,   /**< hash mismatch */
  CORTIQ_ERR_UNSUPPORTED = -6, /**< valid input this build cannot run (no tokenizer, arch…) */
  CORTIQ_ERR_BUFFER = -7,      /**< output buffer too small: the needed size was written */
  CORTIQ_ERR_NUMERIC = -8,     /**< NaN / Inf in the model's output */
  CORTIQ_ERR_INTERNAL = -9     /**< anything else (a bug: please report the message) */
} cortiq_status;

typedef struct cortiq_file cortiq_file;       /**< an opened .cmf file or shard set */
typedef struct cortiq_model cortiq_model;     /**< a loaded, runnable model */
typedef struct cortiq_context cortiq_context; /**< one conversation / sequence over a model */
typedef struct cortiq_stream cortiq_stream;   /**< a generation in progress (pull-style streaming) */

/** The message of the last failing call on this thread ("" if none). Never NULL. */
CORTIQ_API const char* cortiq_last_error(void);
/** Library version, e.g. "0.1.0". */
CORTIQ_API const char* cortiq_version(void);
/** Frees a string returned by the library (NULL is ignored). */
CORTIQ_API void cortiq_string_free(char* s);

/* ---------------------------------------------------------------- files -------------------- */

/** Opens and validates a .cmf file (strict open-time checks; tensor hashes are not read). A shard
 *  name `stem-00001-of-00003.cmf` opens the whole set. */
CORTIQ_API cortiq_status cortiq_file_open(const char* path, cortiq_file** out);
/** Closes a file handle; NULL or an already closed handle is ignored. */
CORTIQ_API void cortiq_file_close(cortiq_file* f);
/** Number of files: 1, or the shard count of a set. 0 for a bad handle. */
CORTIQ_API size_t cortiq_file_num_files(const cortiq_file* f);
/** Full integrity check (every tensor hash, header/directory/section hashes; `cortiq verify`).
 *  CORTIQ_OK when intact; CORTIQ_ERR_INTEGRITY with the problems (one per line) in
 *  cortiq_last_error() and, when `problems` is not NULL, in *problems (free with
 *  cortiq_string_free; "" when intact). */
CORTIQ_API cortiq_status cortiq_file_verify(const cortiq_file* f, char** problems);
/** A JSON object describing the file: {"arch", "num_layers", "hidden_size", "vocab_size",
 *  "max_position_embeddings", "num_tensors", "num_files", "parameters", "tasks": [names],
 *  "skills": [ids], "has_tokenizer", "has_chat_template"}. Free with cortiq_string_free. */
CORTIQ_API cortiq_status cortiq_file_info_json(const cortiq_file* f, char** json);

/* ---------------------------------------------------------------- models ------------------- */

/** Load settings. Initialize with cortiq_model_params_default(). */
typedef struct cortiq_model_params {
  size_t struct_size; /**< sizeof(cortiq_model_params) */
  size_t threads;     /**< kernel threads, 0 = all cores (default 0) */
  size_t ctx;         /**< KV positions per sequence; 0 = min(max_position_embeddings, 4096) */
  size_t n_parallel;  /**< engine slots: contexts generating at once (default 1) */
  int kv_f16;         /**< nonzero: f16 KV cache */
  int exact;          /**< nonzero: f32 activations in every matvec (`--exact`) */
  int check_tensors;  /**< nonzero: verify every tensor hash before loading */
} cortiq_model_params;

/** The defaults: `struct_size` set, one engine slot (`n_parallel` 1), every other field 0. */
CORTIQ_API cortiq_model_params cortiq_model_params_default(void);
/** Loads a .cmf (or shard set) for inference. `params` may be NULL (defaults). */
CORTIQ_API cortiq_status cortiq_model_open(const char* path, const cortiq_model_params* params,
                                           cortiq_model** out);
/** Releases the caller's reference; contexts still open keep the model alive. */
CORTIQ_API void cortiq_model_close(cortiq_model* m);
/** Vocabulary size (logits per position); 0 for a bad handle. */
CORTIQ_API size_t cortiq_model_n_vocab(const cortiq_model* m);
/** Hidden size (floats per embedding); 0 for a bad handle. */
CORTIQ_API size_t cortiq_model_n_embd(const cortiq_model* m);
/** KV capacity in tokens (a prompt must be shorter); 0 for a bad handle. */
CORTIQ_API size_t cortiq_model_n_ctx(const cortiq_model* m);
/** The model's end-of-generation ids: writes up to `cap` ids, returns how many there are. */
CORTIQ_API size_t cortiq_model_eos_ids(const cortiq_model* m, int32_t* ids, size_t cap);

/** Tokenization modes. */
typedef enum cortiq_tokenize_mode {
  CORTIQ_TOKENIZE_PLAIN = 0,   /**< the text's tokens alone (HF add_special_tokens=false) */
  CORTIQ_TOKENIZE_SPECIAL = 1, /**< with the tokenizer's post-processor (HF add_special_tokens=true) */
  CORTIQ_TOKENIZE_PROMPT = 2   /**< as `cortiq run -p` encodes a raw prompt: plain, BOS prepended
                                    when the model asks for one */
} cortiq_tokenize_mode;

/** Token ids of `text` [len bytes]. Writes up to `cap` ids into `ids` and the count into *n_ids;
 *  CORTIQ_ERR_BUFFER when cap < *n_ids (call again with a larger buffer). */
CORTIQ_API cortiq_status cortiq_tokenize(const cortiq_model* m, const char* text, size_t len,
                                         cortiq_tokenize_mode mode, int32_t* ids, size_t cap, size_t* n_ids);
/** Text of `ids` [n] through the tokenizer's decoder (special tokens dropped when
 *  `skip_special`). Free *text with cortiq_string_free; *len (optional) gets its length. */
CORTIQ_API cortiq_status cortiq_detokenize(const cortiq_model* m, const int32_t* ids, size_t n,
                                           int skip_special, char** text, size_t* len);

/** A chat message (UTF-8, NUL-terminated). */
typedef struct cortiq_chat_message {
  const char* role;
  const char* content;
} cortiq_chat_message;

/** Renders `messages` [n] with the model's chat template (transformers apply_chat_template:
 *  add_generation_prompt = true; enable_thinking = false when `no_think`). CORTIQ_ERR_ARGUMENT when
 *  the model has no template. Free *text with cortiq_string_free. */
CORTIQ_API cortiq_status cortiq_chat_render(const cortiq_model* m, const cortiq_chat_message* messages,
                                            size_t n, int no_think, char** text);

/* ---------------------------------------------------------------- contexts ----------------- */

/** Makes a context: one sequence over `m` with its own task mask and skill (initially the
 *  model's defaults: the catalog's fallback task, the backbone). */
CORTIQ_API cortiq_status cortiq_context_new(cortiq_model* m, cortiq_context** out);
/** Frees a context (and its open stream, if any); NULL or an already freed handle is ignored. */
CORTIQ_API void cortiq_context_free(cortiq_context* c);
/** Task mask for this context's runs: a mask name of the file, "off" (dense), or "" (the file's
 *  fallback). Unknown → CORTIQ_ERR_ARGUMENT listing the available ones. */
CORTIQ_API cortiq_status cortiq_context_set_task(cortiq_context* c, const char* task);
/** Skill for this context's runs: a skill id of the file, or "" / "none" / "backbone". When no
 *  task was set explicitly, the skill's own input mask (if it names one) becomes the task. */
CORTIQ_API cortiq_status cortiq_context_set_skill(cortiq_context* c, const char* skill);

/** Sampler settings. Initialize with cortiq_sampler_params_default() (`cortiq run`'s defaults). */
typedef struct cortiq_sampler_params {
  size_t struct_size;      /**< sizeof(cortiq_sampler_params) */
  float temperature;       /**< < 1e-6: greedy (argmax); default 0.7 */
  float top_p;             /**< >= 1 disables; default 0.9 */
  int32_t top_k;           /**< <= 0 disables; default 40 */
  float min_p;             /**< <= 0 disables; default 0.05 */
  float repeat_penalty;    /**< 1 disables (default) */
  float presence_penalty;  /**< 0 disables (default) */
  int64_t seed;            /**< < 0: random (default -1) */
  size_t max_tokens;       /**< tokens to generate at most (default 256) */
  const char* const* stop; /**< stop strings (cut from the text), `n_stop` of them */
  size_t n_stop;
} cortiq_sampler_params;

/** `cortiq run`'s sampling defaults (the runtime's SamplerParams), a random seed (-1), 256
 *  tokens at most, no stop strings; `struct_size` set. */
CORTIQ_API cortiq_sampler_params cortiq_sampler_params_default(void);
/** `cortiq run --greedy`: temperature 0, no penalties. */
CORTIQ_API cortiq_sampler_params cortiq_sampler_params_greedy(void);

/** Why a generation ended. */
typedef enum cortiq_finish {
  CORTIQ_FINISH_NONE = 0,       /**< still running */
  CORTIQ_FINISH_STOP = 1,       /**< an end-of-generation id or a stop string */
  CORTIQ_FINISH_MAX_TOKENS = 2, /**< max_tokens reached */
  CORTIQ_FINISH_LENGTH = 3,     /**< the context is full */
  CORTIQ_FINISH_CANCELLED = 4   /**< the callback returned nonzero / cortiq_stream_cancel; no piece
                                     is delivered after it */
} cortiq_finish;

typedef struct cortiq_generate_result {
  cortiq_finish finish;
  size_t prompt_tokens;    /**< tokens of the prompt */
  size_t reused_tokens;    /**< prompt tokens whose KV came from the prompt cache */
  size_t generated_tokens; /**< tokens sampled (an end-of-generation id included) */
} cortiq_generate_result;

/** Streaming callback: a piece of final text (UTF-8 complete, never part of a stop string).
 *  Return 0 to go on, nonzero to cancel (the generation ends with CORTIQ_FINISH_CANCELLED). */
typedef int (*cortiq_text_callback)(const char* piece, size_t len, void* user);

/** Generates from `prompt` [n] ids. The prompt cache of the context's slot is reused when the new
 *  prompt extends the previous sequence (bit-identical to a full prefill). `params` NULL = defaults;
 *  `on_text` may be NULL; `result` may be NULL. */
CORTIQ_API cortiq_status cortiq_generate(cortiq_context* c, const int32_t* prompt, size_t n,
                                         const cortiq_sampler_params* params, cortiq_text_callback on_text,
                                         void* user, cortiq_generate_result* result);

/** Pull-style streaming (for bindings that want an iterator): starts a generation. */
CORTIQ_API cortiq_status cortiq_stream_begin(cortiq_context* c, const int32_t* prompt, size_t n,
                                             const cortiq_sampler_params* params, cortiq_stream** out);
/** Waits for the next piece of text: returns 1 with *piece and *len set (valid until the next call on
 *  the stream), 0 when the generation has ended, or a negative error code (the error that ended it). */
CORTIQ_API int cortiq_stream_next(cortiq_stream* s, const char** piece, size_t* len);
/** Stops the generation: the engine stops at its next step, cortiq_stream_next returns 0 from now
 *  on (pieces not yet delivered are dropped) and the finish is CORTIQ_FINISH_CANCELLED — also when
 *  the engine, which runs ahead of the reader, had already reached the end. Any thread may call it
 *  while the stream lives. */
CORTIQ_API void cortiq_stream_cancel(cortiq_stream* s);
/** Ends the stream and frees it; `result` may be NULL. A stream freed before the reader has taken
 *  every piece is cancelled (as by cortiq_stream_cancel: CORTIQ_FINISH_CANCELLED, also when the
 *  engine had already reached the end); a running generation is waited for. */
CORTIQ_API cortiq_status cortiq_stream_free(cortiq_stream* s, cortiq_generate_result* result);

/** Logits of a prompt [n ids] under the context's task mask and skill: `all` = 0 writes the last
 *  position's logits [n_vocab]; nonzero writes every position's [n, n_vocab] (row-major; row j is
 *  the distribution of the token after prompt[j]). `cap` is the capacity of `out` in floats
 *  (CORTIQ_ERR_BUFFER when too small). */
CORTIQ_API cortiq_status cortiq_logits(cortiq_context* c, const int32_t* prompt, size_t n, int all,
                                       float* out, size_t cap);

/** Pooling of cortiq_embed. */
typedef enum cortiq_pooling {
  CORTIQ_POOL_MEAN = 0, /**< mean over the prompt's positions */
  CORTIQ_POOL_LAST = 1  /**< the last position */
} cortiq_pooling;

/** Embedding of a prompt [n ids, n >= 1]: the final hidden state AFTER the final norm (what the
 *  lm_head reads; HF's `last_hidden_state` for Llama-type models), pooled over the positions
 *  (CORTIQ_POOL_MEAN: mean over every position, a BOS in `prompt` included; CORTIQ_POOL_LAST: the
 *  last position's), L2-normalized to unit length: [n_embd] floats into `out` (`cap` floats;
 *  CORTIQ_ERR_BUFFER when smaller). The same vector `cortiq serve` returns from POST /v1/embeddings
 *  for these ids. Runs under the context's skill (dense: no task mask). Equals
 *  cortiq_embed_ex(c, prompt, n, pool, 1, out, cap). */
CORTIQ_API cortiq_status cortiq_embed(cortiq_context* c, const int32_t* prompt, size_t n, cortiq_pooling pool,
                                      float* out, size_t cap);
/** cortiq_embed with a choice: `normalize` nonzero divides the pooled vector by its L2 length (a
 *  zero or non-finite vector is then an error), zero returns the pooled post-norm state as is.
 *  (API version 2.) */
CORTIQ_API cortiq_status cortiq_embed_ex(cortiq_context* c, const int32_t* prompt, size_t n,
                                         cortiq_pooling pool, int normalize, float* out, size_t cap);

/** Perplexity of `text` [len bytes] (`cortiq ppl --mode prefix`): the text encoded as a raw prompt,
 *  its first min(tokens, n_ctx − 1) ids scored as one sequence, PPL = exp(mean NLL of ids[t+1] given
 *  ids[..t]). *ppl gets the perplexity, *scored (optional) the number of scored tokens. */
CORTIQ_API cortiq_status cortiq_perplexity(cortiq_context* c, const char* text, size_t len, double* ppl,
                                           size_t* scored);

#ifdef __cplusplus
}
#endif

#endif /* CORTIQ_H */
