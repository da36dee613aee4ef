"""Python client for the Headwater data platform API.

from headwater_client import Client

with Client.from_env() as hw:
    result = hw.push("acme-crm", "orders", records)
    transaction = hw.upload_file("orders.csv", "acme-crm", "orders", wait=True)
    for category in hw.list_categories(name="onboarding"):
        print(category.name)
"""

from headwater_client._batches import InvalidRecord
from headwater_client._retry import RetryPolicy
from headwater_client.aio import AsyncClient
from headwater_client.client import Client
from headwater_client.config import Credentials
from headwater_client.errors import (
    APIError,
    AuthenticationError,
    ConfigurationError,
    Conflict,
    ConnectionFailed,
    ErasureFailed,
    ExportFailed,
    HeadwaterError,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    PushRejected,
    RateLimited,
    RecordError,
    RecordsInvalid,
    ServiceUnavailable,
    WaitTimeout,
)
from headwater_client.files import read_records
from headwater_client.filters import activity_filter, one_of, time_range
from headwater_client.models import (
    ActivityEntry,
    BatchResult,
    Category,
    Changes,
    Dataset,
    Erasure,
    ErasureCounts,
    Export,
    Page,
    Preview,
    PreviewResult,
    PushResult,
    QuarantinedRow,
    Record,
    Suppression,
    Template,
    TemplateStep,
    Token,
    Transaction,
    TransactionError,
    Transforms,
    UploadTicket,
    WebhookDelivery,
    WebhookEndpoint,
    WhoAmI,
    Workflow,
    WorkflowTask,
)
from headwater_client.pagination import AsyncPager, Pager

__all__ = [
    "APIError",
    "ActivityEntry",
    "AsyncClient",
    "AsyncPager",
    "AuthenticationError",
    "BatchResult",
    "Category",
    "Changes",
    "Client",
    "ConfigurationError",
    "Conflict",
    "ConnectionFailed",
    "Credentials",
    "Dataset",
    "Erasure",
    "ErasureCounts",
    "ErasureFailed",
    "Export",
    "ExportFailed",
    "HeadwaterError",
    "InvalidRecord",
    "InvalidRequest",
    "NotFound",
    "Page",
    "Pager",
    "PayloadTooLarge",
    "PermissionDenied",
    "Preview",
    "PreviewResult",
    "PushRejected",
    "PushResult",
    "QuarantinedRow",
    "RateLimited",
    "Record",
    "RecordError",
    "RecordsInvalid",
    "RetryPolicy",
    "ServiceUnavailable",
    "Suppression",
    "Template",
    "TemplateStep",
    "Token",
    "Transaction",
    "TransactionError",
    "Transforms",
    "UploadTicket",
    "WaitTimeout",
    "WebhookDelivery",
    "WebhookEndpoint",
    "WhoAmI",
    "Workflow",
    "WorkflowTask",
    "activity_filter",
    "one_of",
    "read_records",
    "time_range",
]
