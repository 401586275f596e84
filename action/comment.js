// The harvester action's pull-request comment (action.yml runs this with actions/github-script): one comment
// per pull request, which each run updates, found again by a hidden marker. Anyone who can comment can post
// the marker too, so a marked comment is updated only when this action's own identity wrote it; otherwise
// a new comment is created, and nobody else's comment is ever edited.
"use strict";

const fs = require("fs");

const MARKER = "<!-- harvester-replay -->";
// Who a workflow's GITHUB_TOKEN comments as. That token (an app installation token) cannot ask who it is.
const WORKFLOW_BOT = "github-actions[bot]";
const LIMIT = 60000; // a comment holds 65,536 characters

/** The comment to update: the first that starts with the marker and was written by `login`; null if none. */
function ownComment(comments, login) {
  const me = String(login).toLowerCase();
  return (
    comments.find(
      (c) => c.user && String(c.user.login).toLowerCase() === me && (c.body || "").startsWith(MARKER),
    ) || null
  );
}

/** The login the token posts as: the user a personal token belongs to, else the workflow's bot. */
async function identity(github) {
  try {
    return (await github.rest.users.getAuthenticated()).data.login;
  } catch {
    return WORKFLOW_BOT;
  }
}

/** The comment: the marker, the replay's Markdown summary (cut to fit), the links and the exit code. */
function commentBody({ markdown, code, artifactUrl, runUrl }) {
  let summary = markdown && fs.existsSync(markdown) ? fs.readFileSync(markdown, "utf8") : "";
  if (!summary.trim()) summary = `harvester replay exited ${code || "before running"} without a summary.`;
  if (summary.length > LIMIT) summary = summary.slice(0, LIMIT) + "\n\n… (truncated: see the job summary)";
  const links = [`[run](${runUrl})`];
  if (artifactUrl) links.push(`[HTML report](${artifactUrl})`);
  return `${MARKER}\n${summary}\n\n${links.join(" · ")} · exit code ${code || "none"}\n`;
}

/** Update this identity's marked comment on the pull request, or create one. */
async function upsert({ github, context, markdown, code, artifactUrl }) {
  const where = { owner: context.repo.owner, repo: context.repo.repo };
  const runUrl = `${context.serverUrl}/${where.owner}/${where.repo}/actions/runs/${context.runId}`;
  const body = commentBody({ markdown, code, artifactUrl, runUrl });
  const comments = await github.paginate(github.rest.issues.listComments, {
    ...where,
    issue_number: context.issue.number,
    per_page: 100,
  });
  const mine = ownComment(comments, await identity(github));
  if (mine) {
    await github.rest.issues.updateComment({ ...where, comment_id: mine.id, body });
  } else {
    await github.rest.issues.createComment({ ...where, issue_number: context.issue.number, body });
  }
}

module.exports = { MARKER, WORKFLOW_BOT, ownComment, identity, upsert };
