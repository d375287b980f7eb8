"""Kubernetes names as the API server validates them: why a name would be refused, or None.

- A namespace is an RFC 1123 label: at most 63 characters, lowercase alphanumerics and ``-``,
  alphanumeric at both ends (``ValidateNamespaceName`` = ``IsDNS1123Label`` in
  k8s.io/apimachinery pkg/util/validation/validation.go).
- A node name is an RFC 1123 subdomain: at most 253 characters, such labels joined by ``.``
  (``ValidateNodeName`` = ``IsDNS1123Subdomain``, same file).

>>> label_problem("gpu-operator") is None, label_problem("Bad_NS")
(True, 'must be an RFC 1123 label: lowercase letters, digits and -, a letter or digit at both ends')
>>> subdomain_problem("gpu_01")
'must be an RFC 1123 subdomain: lowercase letters, digits, - and ., a letter or digit at both ends of each part'
"""

from __future__ import annotations

import re

LABEL_MAX = 63
SUBDOMAIN_MAX = 253
LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def label_problem(name: str) -> str | None:
    """Why ``name`` is not an RFC 1123 label (a namespace), or None."""
    if not name:
        return "must not be empty"
    if len(name) > LABEL_MAX:
        return f"must be at most {LABEL_MAX} characters (an RFC 1123 label), not {len(name)}"
    if not LABEL.fullmatch(name):
        return (
            "must be an RFC 1123 label: lowercase letters, digits and -, a letter or digit at "
            "both ends"
        )
    return None


def subdomain_problem(name: str) -> str | None:
    """Why ``name`` is not an RFC 1123 subdomain (a node name), or None."""
    if not name:
        return "must not be empty"
    if len(name) > SUBDOMAIN_MAX:
        return (
            f"must be at most {SUBDOMAIN_MAX} characters (an RFC 1123 subdomain), not {len(name)}"
        )
    if not SUBDOMAIN.fullmatch(name):
        return (
            "must be an RFC 1123 subdomain: lowercase letters, digits, - and ., a letter or "
            "digit at both ends of each part"
        )
    return None
