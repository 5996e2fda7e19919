//! Self-identifying credential formats: a vendor prefix or shape that no ordinary text has.
//!
//! Each entry is `(kind, pattern, check)`. The pattern's group 1 (or the whole match) is the
//! value checked and the value an allowlist entry is compared with. Shapes are the vendors'
//! documented formats as public scanners describe them; the patterns are this project's own.

use super::Check::{self, KeyBlock, Random, Token, Varied};
use super::Run;

/// The vendor formats, most specific first.
pub(super) const VENDOR: &[(&str, &str, Check)] = &[
    (
        "private key block",
        r"-----BEGIN[A-Z0-9 _-]{0,40}PRIVATE KEY(?: BLOCK)?-----(?:\\n|\\r|\s)*(?:[A-Za-z-]+: [^\n\\]*(?:\\n|\s)+)*([A-Za-z0-9+/=]{40,})",
        KeyBlock,
    ),
    (
        "PuTTY private key",
        r"PuTTY-User-Key-File-\d: [a-z0-9-]+\s*\n(?:[A-Za-z-]+: [^\n]*\n){1,3}Public-Lines: \d+\s*\n([A-Za-z0-9+/=]{40,})",
        Varied(12),
    ),
    (
        "age secret key",
        r"\b(AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58})\b",
        Varied(12),
    ),
    (
        "1Password secret key",
        r"\b(A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5})\b",
        Varied(10),
    ),
    (
        "1Password service account token",
        r"\b(ops_eyJ[A-Za-z0-9+/]{200,}={0,3})",
        Varied(12),
    ),
    (
        "AWS access key ID",
        r"\b((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AROA|AIDA|AGPA|ANPA|ANVA|APKA)[0-9A-Z]{16})\b",
        Varied(8),
    ),
    (
        "AWS secret access key",
        r#"(?i)aws.{0,20}(?:secret|private).{0,20}?[:=]\s*["']?([A-Za-z0-9/+]{40})\b"#,
        Varied(12),
    ),
    (
        "AWS Bedrock API key",
        r"\b(ABSK[A-Za-z0-9+/]{100,270}={0,2})",
        Varied(12),
    ),
    (
        "Alibaba Cloud access key ID",
        r"\b(LTAI[A-Za-z0-9]{17,21})\b",
        Random,
    ),
    (
        "GitHub token",
        r"\b((?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255})\b",
        Varied(10),
    ),
    (
        "GitHub token",
        r"\b(github_pat_[A-Za-z0-9_]{60,255})\b",
        Varied(10),
    ),
    (
        "GitLab token",
        r"\b((?:glpat|gldt|glrt|glptt|glcbt|glft|glsoat|gloas|glffct|glimt|glagent|gldt)-[A-Za-z0-9_.-]{20,300})",
        Varied(8),
    ),
    (
        "GitLab token",
        r"\b(GR1348941[A-Za-z0-9_-]{20,})",
        Varied(8),
    ),
    (
        "GitLab session cookie",
        r"_gitlab_session=([0-9a-z]{32})\b",
        Varied(8),
    ),
    (
        "Bitbucket app password",
        r"\b(ATBB[A-Za-z0-9_=.-]{28,})\b",
        Varied(10),
    ),
    (
        "Atlassian API token",
        r"\b(AT[AC]TT3[A-Za-z0-9_=.-]{100,})",
        Varied(10),
    ),
    ("npm token", r"\b(npm_[A-Za-z0-9]{36})\b", Varied(10)),
    ("PyPI token", r"\b(pypi-AgE[A-Za-z0-9_-]{50,})", Varied(10)),
    (
        "RubyGems API key",
        r"\b(rubygems_[a-f0-9]{48})\b",
        Varied(8),
    ),
    ("NuGet API key", r"\b(oy2[a-z0-9]{43})\b", Varied(10)),
    (
        "Clojars token",
        r"(?i)\b(CLOJARS_[a-z0-9]{60})\b",
        Varied(10),
    ),
    (
        "Docker Hub token",
        r"\b(dckr_pat_[A-Za-z0-9_-]{27,})",
        Varied(10),
    ),
    ("JFrog token", r"\b(AKCp[A-Za-z0-9]{60,})\b", Varied(10)),
    ("JFrog token", r"\b(cmVmd[A-Za-z0-9]{55,})\b", Varied(10)),
    (
        "Terraform Cloud token",
        r"\b([A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,})",
        Varied(10),
    ),
    (
        "HashiCorp Vault token",
        r"\b(hv[sbr]\.[A-Za-z0-9_-]{24,})",
        Varied(10),
    ),
    ("HashiCorp Vault token", r"\bs\.([A-Za-z0-9]{24})\b", Random),
    (
        "Anthropic API key",
        r"\b(sk-ant-[a-z0-9]{2,10}\d{0,2}-[A-Za-z0-9_-]{40,})",
        Varied(12),
    ),
    (
        "OpenAI API key",
        r"\b(sk-(?:proj|svcacct|admin|service)-[A-Za-z0-9_-]{40,})",
        Varied(12),
    ),
    (
        "OpenRouter API key",
        r"\b(sk-or-v1-[a-f0-9]{64})\b",
        Varied(10),
    ),
    (
        "Langfuse secret key",
        r"\b(sk-lf-[0-9a-f-]{36})\b",
        Varied(10),
    ),
    (
        "AI provider API key",
        r"\b(sk-[A-Za-z0-9]{32,})\b",
        Varied(12),
    ),
    (
        "AI provider API key",
        r"\b((?:gsk|xai|pplx|r8|nvapi)[_-][A-Za-z0-9_-]{32,})",
        Varied(12),
    ),
    (
        "AI provider API key",
        r"\b(fw_[A-Za-z0-9]{24,})\b",
        Varied(12),
    ),
    (
        "LangSmith API key",
        r"\b(lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10})\b",
        Varied(10),
    ),
    (
        "Hugging Face token",
        r"\b((?:hf_|api_org_)[A-Za-z0-9]{34,})\b",
        Random,
    ),
    ("Google API key", r"\b(AIza[0-9A-Za-z_-]{35})", Varied(10)),
    (
        "Google OAuth client secret",
        r"\b(GOCSPX-[A-Za-z0-9_-]{28})",
        Varied(10),
    ),
    (
        "Google OAuth token",
        r"\b(ya29\.[0-9A-Za-z_-]{30,})",
        Varied(10),
    ),
    (
        "Google OAuth refresh token",
        r"\b(1//0[A-Za-z0-9_-]{40,})",
        Varied(10),
    ),
    (
        "Azure storage account key",
        r"(?i)AccountKey=([A-Za-z0-9+/]{80,}={0,2})",
        Varied(12),
    ),
    (
        "Azure shared access signature",
        r"[?&]sig=([A-Za-z0-9%+/]{30,}(?:%3D|=){0,2})",
        Varied(12),
    ),
    (
        "Azure client secret",
        r"(?:^|[^A-Za-z0-9_~.-])([A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34})",
        Varied(10),
    ),
    (
        "Azure container registry password",
        r"\b([A-Za-z0-9+/]{42}\+ACR[A-Za-z0-9]{6})\b",
        Varied(10),
    ),
    (
        "DigitalOcean token",
        r"\b(do[por]_v1_[a-f0-9]{64})\b",
        Varied(8),
    ),
    (
        "Databricks token",
        r"\b(dapi[a-f0-9]{32}(?:-\d)?)\b",
        Varied(8),
    ),
    (
        "Cloudflare origin CA key",
        r"\b(v1\.0-[A-Za-z0-9-]{160,})",
        Varied(10),
    ),
    (
        "ClickHouse Cloud secret",
        r"\b(4b1d[A-Za-z0-9]{38})\b",
        Varied(10),
    ),
    (
        "Alibaba/cloud key",
        r"\b(pat[A-Za-z0-9]{14}\.[a-f0-9]{64})\b",
        Varied(10),
    ),
    (
        "Fly.io token",
        r"\b(fo1_[A-Za-z0-9_-]{43}|fm[12][ar]?_[A-Za-z0-9+/]{100,}={0,3})",
        Varied(12),
    ),
    (
        "Heroku API key",
        r"\b(HRKU-AA[0-9A-Za-z_-]{58})",
        Varied(10),
    ),
    (
        "Slack token",
        r"\b(xox[abcposre]-\d[0-9A-Za-z-]*-[0-9A-Za-z]{12,})",
        Varied(8),
    ),
    // legacy workspace tokens without the numeric parts (`xoxa-<random>`, `xoxr-2-<random>`)
    (
        "Slack token",
        r"\b(xox[ar]-(?:\d-)?[0-9A-Za-z]{12,48})\b",
        Random,
    ),
    // the browser session cookie: URL-encoded base64
    (
        "Slack token",
        r"\b(xoxd-[A-Za-z0-9%+/=_-]{40,})",
        Varied(12),
    ),
    (
        "Slack token",
        r"\b(xoxe\.xox[bp]-\d-[A-Za-z0-9]{60,})",
        Varied(8),
    ),
    (
        "Slack token",
        r"\b(xapp-\d-[A-Za-z0-9]+-\d+-[A-Za-z0-9]{16,})",
        Varied(8),
    ),
    (
        "Slack webhook URL",
        r"hooks\.slack(?:-gov)?\.com(?:/|\\/)(?:services|workflows|triggers)(?:/|\\/)([A-Za-z0-9_]{6,}(?:/|\\/)[A-Za-z0-9_/\\-]{16,})",
        Varied(10),
    ),
    (
        "Discord webhook URL",
        r"discord(?:app)?\.com/api/(?:v\d{1,2}/)?webhooks/\d{15,20}/([A-Za-z0-9_-]{50,})",
        Varied(10),
    ),
    (
        "Discord bot token",
        r"\b([MNO][A-Za-z0-9_-]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40})\b",
        Varied(12),
    ),
    (
        "Telegram bot token",
        r"\b(\d{5,16}:A[0-9A-Za-z_-]{34})",
        Varied(10),
    ),
    (
        "Microsoft Teams webhook URL",
        r"(?:webhook\.office\.com/webhookb2|outlook\.office(?:365)?\.com/webhook)/([A-Za-z0-9-]{20,}@[A-Za-z0-9-]{20,}/IncomingWebhook/[A-Za-z0-9]{20,}/[A-Za-z0-9-]{20,})",
        Varied(8),
    ),
    ("Twilio API key", r"\b(SK[0-9a-fA-F]{32})\b", Varied(8)),
    (
        "SendGrid API key",
        r"\b(SG\.[A-Za-z0-9_-]{20,24}\.[A-Za-z0-9_-]{39,50})",
        Varied(10),
    ),
    (
        "Brevo API key",
        r"\b(xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16})\b",
        Varied(10),
    ),
    ("Mailgun key", r"\b((?:pub)?key-[0-9a-f]{32})\b", Varied(8)),
    (
        "Mailgun signing key",
        r"\b([a-h0-9]{32}-[a-h0-9]{8}-[a-h0-9]{8})\b",
        Varied(8),
    ),
    (
        "Mailchimp API key",
        r"\b([0-9a-f]{32}-us\d{1,2})\b",
        Varied(8),
    ),
    (
        "Stripe secret key",
        r"\b((?:sk|rk)_(?:live|test|prod)_[0-9A-Za-z]{20,})\b",
        Varied(10),
    ),
    (
        "Stripe webhook secret",
        r"\b(whsec_[A-Za-z0-9]{32,})\b",
        Varied(10),
    ),
    (
        "Square token",
        r"\b(sq0(?:atp|csp)-[0-9A-Za-z_-]{22,43})",
        Varied(10),
    ),
    ("Square token", r"\b(EAAA[A-Za-z0-9_-]{60})\b", Varied(10)),
    (
        "Facebook access token",
        r"\b(EAA[A-Za-z0-9]{90,})",
        Varied(12),
    ),
    (
        "Twitter bearer token",
        r"\bA{20,24}([A-Za-z0-9%]{60,120})",
        Varied(12),
    ),
    (
        "PayPal/Braintree access token",
        r"(access_token\$(?:production|sandbox)\$[0-9a-z]{16}\$[0-9a-f]{32})",
        Varied(8),
    ),
    (
        "Shopify token",
        r"\b(shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32})\b",
        Varied(8),
    ),
    (
        "Shippo API key",
        r"\b(shippo_(?:live|test)_[a-fA-F0-9]{40})\b",
        Varied(8),
    ),
    (
        "EasyPost API key",
        r"\b(EZ[AT]K[A-Za-z0-9]{54})\b",
        Varied(10),
    ),
    (
        "Lob API key",
        r"\b((?:live|test)_(?:pub_)?[a-f0-9]{31,35})\b",
        Varied(10),
    ),
    (
        "Flutterwave key",
        r"\b(FLW(?:SECK|PUBK)(?:_TEST)?-[A-Za-z0-9]{32}-X)\b",
        Varied(10),
    ),
    (
        "Flutterwave key",
        r"\b(FLWSECK_TEST[a-h0-9]{12})\b",
        Varied(8),
    ),
    (
        "Duffel token",
        r"\b(duffel_(?:test|live)_[A-Za-z0-9_=-]{43})",
        Varied(10),
    ),
    (
        "Linear API key",
        r"\b(lin_api_[A-Za-z0-9]{40})\b",
        Varied(10),
    ),
    (
        "Notion token",
        r"\b((?:secret_[A-Za-z0-9]{43}|ntn_[A-Za-z0-9]{46}))\b",
        Varied(10),
    ),
    (
        "Doppler token",
        r"\b(dp\.(?:pt|st(?:\.[a-z0-9_-]{2,35})?|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44})",
        Varied(10),
    ),
    (
        "Postman API key",
        r"\b(PMAK-[a-f0-9]{24}-[a-f0-9]{34})\b",
        Varied(8),
    ),
    ("Grafana token", r"\b(glsa_[A-Za-z0-9_]{41})\b", Varied(8)),
    (
        "Grafana token",
        r"\b(glc_[A-Za-z0-9+/]{32,400}={0,3})",
        Varied(12),
    ),
    (
        "Grafana token",
        r"\b(eyJrIjoi[A-Za-z0-9]{70,400}={0,3})",
        Varied(12),
    ),
    (
        "Sentry auth token",
        r"(?:^|[^A-Za-z0-9])(sntr[ysu]_[A-Za-z0-9+/=_-]{40,})",
        Varied(10),
    ),
    (
        "New Relic key",
        r"\b(NR(?:AK|II|IQ|JS|RA)-[A-Za-z0-9_-]{19,32})",
        Varied(8),
    ),
    ("New Relic key", r"\b(NRBR-[0-9a-f]{19})\b", Varied(8)),
    (
        "Dynatrace token",
        r"\b(dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64})\b",
        Varied(10),
    ),
    (
        "PlanetScale token",
        r"\b(pscale_(?:pw|tkn|oauth)_[A-Za-z0-9_=.-]{32,64})",
        Varied(10),
    ),
    (
        "Sourcegraph token",
        r"\b(sgp_(?:[a-fA-F0-9]{16}_|local_)?[a-fA-F0-9]{40})\b",
        Varied(10),
    ),
    ("Prefect API key", r"\b(pnu_[A-Za-z0-9]{36})\b", Varied(10)),
    ("Pulumi access token", r"\b(pul-[a-f0-9]{40})\b", Varied(10)),
    ("ReadMe API key", r"\b(rdme_[a-z0-9]{70})\b", Varied(10)),
    ("Rootly API key", r"\b(rootly_[a-f0-9]{64})\b", Varied(10)),
    ("Scalingo token", r"\b(tk-us-[A-Za-z0-9_-]{48})", Varied(10)),
    (
        "Settlemint token",
        r"\b(sm_(?:pat|aat|sat)_[A-Za-z0-9]{16})\b",
        Varied(8),
    ),
    ("Supabase token", r"\b(sbp_[a-z0-9]{40})\b", Varied(10)),
    (
        "Tailscale key",
        r"\b(tskey-[a-z]+-[0-9A-Za-z_]{6,}-[0-9A-Za-z_]{16,})",
        Varied(10),
    ),
    (
        "Voiceflow API key",
        r"\b(VF\.(?:(?:DM|WS)\.)?[a-fA-F0-9]{24}\.[A-Za-z0-9]{16})\b",
        Varied(10),
    ),
    (
        "Infracost API key",
        r"\b(ico-[A-Za-z0-9]{32})\b",
        Varied(10),
    ),
    (
        "42 Intra client secret",
        r"\b([su]-s4t2(?:ud|af)-[a-f0-9]{64})\b",
        Varied(10),
    ),
    ("Octopus Deploy API key", r"\b(API-[A-Z0-9]{26})\b", Random),
    (
        "OpenShift token",
        r"\b(sha256~[A-Za-z0-9_-]{43})",
        Varied(10),
    ),
    ("Adafruit IO key", r"\b(aio_[A-Za-z0-9]{28})\b", Varied(10)),
    (
        "Adobe client secret",
        r"\b(p8e-[A-Za-z0-9]{32})\b",
        Varied(10),
    ),
    (
        "Contentful token",
        r"\b(CFPAT-[A-Za-z0-9_-]{43})",
        Varied(10),
    ),
    (
        "Deno Deploy token",
        r"\b(dd[pw]_[A-Za-z0-9]{36})\b",
        Varied(10),
    ),
    (
        "Defined Networking token",
        r"\b(dnkey-[a-z0-9=_-]{26}-[a-z0-9=_-]{52})",
        Varied(10),
    ),
    ("Endor Labs key", r"\b(endr\+[A-Za-z0-9-]{16})", Varied(8)),
    ("Flexport key", r"\b(shltm_[A-Za-z0-9_-]{40})", Varied(10)),
    (
        "Frame.io token",
        r"\b(fio-u-[A-Za-z0-9_=-]{64})",
        Varied(10),
    ),
    (
        "Harness token",
        r"\b((?:pat|sat)\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20})\b",
        Varied(10),
    ),
    (
        "Authress key",
        r"(?i)\b((?:sc|ext|scauth|authress)_[a-z0-9]{5,30}\.[a-z0-9]{4,6}\.acc[_-][a-z0-9-]{10,32}\.[a-z0-9+/_=-]{30,120})",
        Varied(10),
    ),
    (
        "MaxMind license key",
        r"\b([A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk)\b",
        Varied(10),
    ),
    (
        "Mapbox secret token",
        r"\b(sk\.eyJ[A-Za-z0-9._-]{60,})",
        Varied(10),
    ),
    ("Klaviyo key", r"\b(pk_[0-9a-f]{34})\b", Varied(10)),
    (
        "LaunchDarkly key",
        r"\b((?:api|sdk)-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12})\b",
        Varied(10),
    ),
    (
        "PostHog personal key",
        r"\b(phx_[A-Za-z0-9_]{43,48})\b",
        Varied(10),
    ),
    (
        "Ramp key",
        r"\b(ramp_(?:id|sec)_[A-Za-z0-9]{40,48})\b",
        Varied(10),
    ),
    (
        "Jenkins encrypted secret",
        r"\{(AQAAABAAAA[A-Za-z0-9+/=]{20,})\}",
        KeyBlock,
    ),
    (
        "webhook URL",
        r"(?i)\b(?:https?://)?[a-z0-9.-]+\.[a-z]{2,}(?::\d{1,5})?/(?:[A-Za-z0-9._~-]+/){0,3}?(?:web)?hooks?/(?:[A-Za-z0-9._~-]{1,40}/){0,3}?([A-Za-z0-9_-]{16,128}(?:/[A-Za-z0-9_-]{16,128})?)",
        Token,
    ),
    (
        "Twitter access token",
        r"\b([0-9]{15,25}-[A-Za-z0-9]{20,50})\b",
        Random,
    ),
    (
        "Sumo Logic access ID",
        r"(?i)sumo[^\n]{0,40}?\b(su[A-Za-z0-9]{12})\b",
        Random,
    ),
    (
        "Zapier webhook URL",
        r"hooks\.zapier\.com/hooks/catch/(\d{4,12}/[A-Za-z0-9]{5,40})",
        Varied(8),
    ),
    (
        "IFTTT webhook key",
        r"maker\.ifttt\.com/trigger/[^/\s]{1,100}/with/key/([A-Za-z0-9_-]{16,})",
        Varied(10),
    ),
    (
        "Pipedream webhook URL",
        r"\b(e[nob][a-z0-9]{10,40})\.m\.pipedream\.net",
        Varied(10),
    ),
    (
        "Yandex token",
        r"\b(y[0-3]_[A-Za-z0-9_-]{40,100}|AQVN[A-Za-z0-9_-]{35,38}|t1\.[A-Za-z0-9_-]{10,}={0,2}\.[A-Za-z0-9_-]{86}={0,2})",
        Varied(12),
    ),
    ("Yandex token", r"\b(YC[A-Za-z0-9_-]{38})\b", Random),
    (
        "Twilio auth token",
        r"(?i)twilio[^\n]{0,80}?\b([0-9a-f]{32})\b",
        Varied(10),
    ),
    (
        "Facebook app access token",
        r"\b(\d{15,16}(?:\||%7C)[0-9A-Za-z_-]{27,40})\b",
        Varied(12),
    ),
    (
        "Cloudinary URL",
        r"cloudinary://\d{6,20}:([A-Za-z0-9_-]{16,64})@[A-Za-z0-9_-]+",
        Varied(10),
    ),
    // Sidekiq Pro/Enterprise: `hex8:hex8` given to bundler for contribsys.com
    (
        "Sidekiq credentials",
        r"(?i:BUNDLE_(?:ENTERPRISE|GEMS)__CONTRIBSYS__COM|contribsys\.com)[\x22'`]?[ \t]*[=:]?[ \t]*[\x22'`]?([a-f0-9]{8}:[a-f0-9]{8})\b",
        Varied(6),
    ),
    (
        "Sidekiq credentials",
        r"\b([a-f0-9]{8}:[a-f0-9]{8})@(?:enterprise|gems)\.contribsys\.com",
        Varied(6),
    ),
    // Dropbox long-lived tokens: 11 characters, ten `A`, 43 characters (the `A` run is the
    // format's, not a placeholder's)
    (
        "Dropbox token",
        r"\b([A-Za-z0-9]{11}AAAAAAAAAA[A-Za-z0-9_=-]{43})(?:[^A-Za-z0-9_=-]|$)",
        KeyBlock,
    ),
    (
        "Dropbox token",
        r"\b(sl\.(?:u\.)?[A-Za-z0-9_=-]{120,})",
        Varied(12),
    ),
    (
        "Airtable API key",
        r"(?i:airtable)[^\n]{0,60}?\b(key[A-Za-z0-9]{14})\b",
        Random,
    ),
    (
        "Asana token",
        r"\b(\d/\d{16}/\d{16}:[a-f0-9]{32})\b",
        Varied(10),
    ),
];

/// Vendor formats without a literal that run only on the lines holding a [`Run`].
pub(super) const VENDOR_RUNS: &[(&str, Run)] = &[
    (
        "Twitter access token",
        Run {
            class: digit_byte,
            min: 15,
            after: b"-",
        },
    ),
    (
        "Facebook app access token",
        Run {
            class: digit_byte,
            min: 15,
            after: b"|%",
        },
    ),
    (
        "Asana token",
        Run {
            class: digit_byte,
            min: 16,
            after: b"/",
        },
    ),
    (
        "Mailgun signing key",
        Run {
            class: |b| b.is_ascii_digit() || (b'a'..=b'h').contains(&b),
            min: 32,
            after: b"-",
        },
    ),
];

/// A digit of a `\d` or `[0-9]`: a byte of a non-ASCII character counts too, since `\d` also
/// matches Unicode digits (each two bytes or more).
pub(super) fn digit_byte(b: u8) -> bool {
    b.is_ascii_digit() || b >= 0x80
}

/// Vendor formats without a literal of their own, and a word every match of theirs holds: they
/// run only on texts that hold it.
pub(super) const VENDOR_ANCHORS: &[(&str, &str)] =
    &[("webhook URL", "(?i:hook)"), ("Azure client secret", "Q~")];
