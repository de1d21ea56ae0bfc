// The one translation unit that compiles Boost.Asio's and Boost.Beast's non-template code:
// kiln_server_rest builds with BOOST_ASIO_SEPARATE_COMPILATION and
// BOOST_BEAST_SEPARATE_COMPILATION, so the other files include only declarations.
#include "boost/asio/impl/src.hpp"
#include "boost/beast/src.hpp"
#include "boost/asio/ssl/impl/src.hpp"
