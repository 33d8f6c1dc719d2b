# cmake -DIN=web/index.html -DOUT=gen/page_html.cc -P cmake/embed_web.cmake
# Writes a C++ source defining cortiq::server::chat_page_html() (server/page.h) with IN's bytes as
# a raw string literal. The page must not contain the delimiter `)cortiq_page"`.
file(READ "${IN}" _page)
string(FIND "${_page}" ")cortiq_page\"" _bad)
if(NOT _bad EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )cortiq_page\"")
endif()
file(WRITE "${OUT}.tmp"
     "// Generated from ${IN} by cmake/embed_web.cmake: do not edit.\n"
     "#include \"server/page.h\"\n"
     "namespace cortiq::server {\n"
     "namespace {\nconstexpr char kPage[] = R\"cortiq_page(${_page})cortiq_page\";\n}  // namespace\n"
     "std::string_view chat_page_html() noexcept { return {kPage, sizeof(kPage) - 1}; }\n"
     "}  // namespace cortiq::server\n")
file(RENAME "${OUT}.tmp" "${OUT}")
