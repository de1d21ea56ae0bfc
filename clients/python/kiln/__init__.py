"""kiln: Python client for kilnd.

  kiln.Client(url)         KServe v2 inference and kiln.v1.Engine over gRPC (numpy in and out)
  kiln.Tensor(data)        a lazy tensor (tinygrad/numpy surface) realized on kilnd
  kiln.set_server(url)     where kiln.Tensor realizes (default $KILN_URL or localhost:8001)
"""

from kiln.client import Client, KilnError, default_client, set_server
from kiln.tensor import Tensor

__all__ = ["Client", "KilnError", "Tensor", "default_client", "set_server"]
