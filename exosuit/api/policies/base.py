"""Base rules (check strings shared by the per-resource rules)."""

from collections.abc import Sequence

from oslo_policy import policy

ADMIN = "rule:admin_api"
SERVICE = "rule:service_api"
PROJECT_READER_OR_ADMIN = "rule:project_reader_or_admin"
PROJECT_MEMBER_OR_ADMIN = "rule:project_member_or_admin"
PROJECT_MANAGER_OR_ADMIN = "rule:project_manager_or_admin"
PROJECT_MEMBER_OR_SERVICE = "rule:project_member_or_service"
ADMIN_OR_SERVICE = "rule:admin_or_service"

_rules = [
    policy.RuleDefault("admin_api", "role:admin", "Legacy admin: the admin role."),
    policy.RuleDefault("service_api", "role:service", "A service user (role service)."),
    policy.RuleDefault(
        "project_reader_api", "role:reader and project_id:%(project_id)s", "Project reader."
    ),
    policy.RuleDefault(
        "project_member_api", "role:member and project_id:%(project_id)s", "Project member."
    ),
    policy.RuleDefault(
        "project_manager_api", "role:manager and project_id:%(project_id)s", "Project manager."
    ),
    policy.RuleDefault(
        "project_admin_api", "role:admin and project_id:%(project_id)s", "Project admin."
    ),
    policy.RuleDefault(
        "project_reader_or_admin", "rule:project_reader_api or rule:admin_api", "Reader or admin."
    ),
    policy.RuleDefault(
        "project_member_or_admin", "rule:project_member_api or rule:admin_api", "Member or admin."
    ),
    policy.RuleDefault(
        "project_manager_or_admin",
        "rule:project_manager_api or rule:admin_api",
        "Manager or admin.",
    ),
    policy.RuleDefault(
        "project_member_or_service",
        "rule:project_member_api or rule:service_api",
        "Member or service.",
    ),
    policy.RuleDefault(
        "admin_or_service", "rule:admin_api or rule:service_api", "Admin or service."
    ),
]


def list_rules() -> Sequence[policy.RuleDefault]:
    return _rules
